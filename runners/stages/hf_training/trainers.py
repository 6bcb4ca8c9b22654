"""The hf_training stages: training as Hugging Face users train, through the libraries' own
trainers, with the device found the way those libraries find it.

- `trainer`: `transformers.Trainer` with `TrainingArguments` as a user writes them (an output
  folder, the steps, the batch size, the seed; nothing about the device), for `TRAINER_STEPS`
  optimizer steps over a tiny `datasets.Dataset` built from the family's inputs; then
  `trainer.save_model()` and `from_pretrained` of that folder: the same weights, the same
  forward;
- `trainer_compiled`: the same with `torch_compile=True`, the backend left to transformers (it
  picks the device's: `torch_compile_backend` is recorded in `hf_settings`), with the
  recompiles after the first step (`recompile_count`);
- `sft`: TRL's `SFTTrainer` with a peft `LoraConfig` (peft's default target modules for the
  model type) on a tiny text dataset, for causal language models (`not_applicable` for the
  rest). Texts are tokenised by the model's own tokenizer class where the family has one that
  builds offline from nothing (a byte-level tokenizer needs no vocabulary file); else the
  dataset holds token ids, as TRL takes a pre-tokenised dataset (`hf_settings` says which).

The model is handed to the trainer on the CPU, as `from_pretrained` gives it to users; the
trainer places it. After the steps the stage proves where it trained: every parameter and every
tensor of the optimizer's state on the run's device (`trained_on`), else the stage fails with
the signature "trained on cpu, not on DEVICE". On a device other than the CPU the same trainer
runs again on the CPU (`use_cpu=True`) from the same weights, seed and data: the loss of each
step (the trainer's own log) and the final parameters must agree within the run dtype's
tolerance (both sides train in the run's dtype; `max_abs_error` is the worst difference).
Dropout is off on both sides (its probabilities set to 0), as the other training stages run in
eval mode: the CPU takes the same steps as the device. The step count and the learning-rate
schedule are the trainer's own.

A failure names where it happened (`library_frame`): the innermost frame of transformers,
accelerate, trl, peft or datasets in its traceback, so that a report tells a library's device
path from the device itself (an op or a collective).

trl, datasets and accelerate are imported inside these stages only: the default stages never
import them.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import math
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch

from ground.schema import SkipReason, Stage
from runners.stages.engine import StageContext, StageRunner, StageSkipped, check_close
from runners.stages.training.steps import loaded_weights, lora_target_modules, peft_model_type

TRAINER_STEPS = 3
SFT_STEPS = 2
SFT_TEXTS = (
    "The device trains the model.",
    "A tiny dataset of a few short texts.",
    "Each step moves the adapters a little.",
    "Losses are compared with the CPU.",
)
# The libraries whose frames a failure is placed in (the first path part under site-packages).
LIBRARIES = ("transformers", "accelerate", "trl", "peft", "datasets")
LORA_RANK = 4


class TiesBroken(RuntimeError):
    """The trained model no longer shares a parameter its loaded weights shared."""

    library_frame = "transformers/trainer.py:_move_model_to_device"


def tied_names(model: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter that several places of `model` hold (tied weights)."""
    places: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        places.setdefault(id(p), []).append(name)
    return [names for names in places.values() if len(names) > 1]


def check_ties(source: torch.nn.Module, trained: torch.nn.Module) -> None:
    """The weights tied in the loaded model are still one parameter after the trainer's steps.
    Moving a model to a device whose tensors cannot take a CPU tensor's place in place (a
    PrivateUse1 device, as XLA) makes a new parameter per place, and transformers' Trainer
    re-ties them after its move on TPU only (`trainer.py: _move_model_to_device`): the two
    copies then train apart."""
    params = dict(trained.named_parameters(remove_duplicate=False))
    for names in tied_names(source):
        held = {id(params[n]) for n in names if n in params}
        if len(held) > 1:
            raise TiesBroken(
                f"the trainer's move to the device untied {' and '.join(names[:2])}: they "
                "trained as separate parameters (transformers re-ties them after the move on "
                "TPU only: transformers/trainer.py:_move_model_to_device)"
            )


class TrainedElsewhere(RuntimeError):
    """The trainer ran, but the model or its optimizer's state is not on the run's device."""


def _need(*packages: str) -> None:
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise StageSkipped(
            SkipReason.MISSING_PACKAGE,
            f"the hf_training stages need {', '.join(missing)} "
            "(pip install 'hfsweep[hf-training]')",
        )


@contextlib.contextmanager
def library_failure(ctx: Any) -> Iterator[None]:
    """Around a trainer's work: a failure inside a library names its file and function
    (`library_frame`), and accelerate's process-wide state is reset whatever happened."""
    try:
        yield
    except Exception as exc:
        where = getattr(exc, "library_frame", None) or library_frame(exc)
        if where is not None:
            ctx.extra["library_frame"] = where
        raise
    finally:
        reset_accelerate_state()


def library_frame(exc: BaseException) -> str | None:
    """`library/path.py:function` of the innermost frame of a Hugging Face library in the
    traceback of `exc` (or of what caused it), or None."""
    found: str | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame in traceback.extract_tb(current.__traceback__):
            parts = Path(frame.filename).parts
            if "site-packages" not in parts:
                continue
            rest = parts[parts.index("site-packages") + 1 :]
            if rest and rest[0] in LIBRARIES:
                found = f"{'/'.join(rest)}:{frame.name}"
        current = current.__cause__ or current.__context__
        if found is not None:
            break
    return found


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Every dropout probability of `model` set to 0 (its `Dropout` modules and the float
    attributes modules keep for functional dropout, such as `attention_dropout`)."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)
    return model


def reset_accelerate_state() -> None:
    """Accelerate's process-wide state forgotten: the device trainer and the CPU reference
    each find the device anew, as in two processes."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def step_batches(ctx: StageContext, steps: int) -> tuple[Any, Any]:
    """A `datasets.Dataset` of `steps` rows, each the family's whole training batch (its
    tensors as nested lists), and a collator that gives the batch back as the model takes it
    (the tensors' own dtypes; inputs that are no tensor passed as they are)."""
    from datasets import Dataset

    tensors = {k: v for k, v in ctx.cpu_inputs.items() if isinstance(v, torch.Tensor)}
    constants = {k: v for k, v in ctx.cpu_inputs.items() if k not in tensors}
    dtypes = {k: v.dtype for k, v in tensors.items()}
    columns = {k: [v.float().tolist() if v.is_floating_point() else v.tolist()] * steps
               for k, v in tensors.items()}  # fmt: skip
    dataset = Dataset.from_dict(columns).with_format("torch")

    def collate(rows: list[dict[str, Any]]) -> dict[str, Any]:
        (row,) = rows  # one row per step: the whole batch
        return {**{k: torch.as_tensor(row[k]).to(dtypes[k]) for k in tensors}, **constants}

    return dataset, collate


class _TrainerRun:
    """One trainer's steps: its losses per step, the trainer and the trained model."""

    def __init__(self, trainer: Any, model: torch.nn.Module):
        self.trainer = trainer
        self.model = model
        self.losses = [float(e["loss"]) for e in trainer.state.log_history if "loss" in e]


def placement(model: torch.nn.Module, optimizer: Any) -> tuple[set[str], int, int]:
    """(the device types the trainable parameters and the optimizer's state tensors are on,
    how many parameters, how many state tensors)."""
    params = [p for p in model.parameters() if p.requires_grad]
    inner = getattr(optimizer, "optimizer", optimizer)
    state = [t for s in inner.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    state = [t for t in state if t.dim() > 0]  # AdamW's `step` counts are scalars on the CPU
    return {t.device.type for t in [*params, *state]}, len(params), len(state)


def prove_device(ctx: StageContext, run: _TrainerRun) -> None:
    """Where the trainer trained: its parameters and optimizer state on the run's device."""
    where, n_params, n_state = placement(run.model, run.trainer.optimizer)
    want = ctx.device.torch_device.type
    ctx.extra["trained_on"] = (
        f"{'+'.join(sorted(where))}: {n_params} parameters, {n_state} optimizer state tensors"
    )
    if n_state == 0:
        raise TrainedElsewhere("the optimizer holds no state after the steps: it never stepped")
    if where != {want}:
        other = sorted(where - {want})[0] if where - {want} else "nothing"
        raise TrainedElsewhere(f"trained on {other}, not on {want}")


def compare_with_cpu(ctx: StageContext, run: _TrainerRun, cpu: _TrainerRun) -> None:
    """The losses per step and the final trainable parameters against the CPU trainer's."""
    if len(run.losses) != len(cpu.losses):
        raise RuntimeError(
            f"the trainer logged {len(run.losses)} losses, the CPU's {len(cpu.losses)}"
        )
    check_close(
        "losses per step",
        {f"loss.step{i + 1}": torch.tensor(v) for i, v in enumerate(cpu.losses)},
        {f"loss.step{i + 1}": torch.tensor(v) for i, v in enumerate(run.losses)},
        ctx,
    )
    expected = {n: p.detach() for n, p in cpu.model.named_parameters() if p.requires_grad}
    actual = {n: p.detach().cpu() for n, p in run.model.named_parameters() if n in expected}
    check_close("parameters after the trainer's steps", expected, actual, ctx)


def switched_arguments(ctx: StageContext, stage: Stage) -> dict[str, Any]:
    """The `TrainingArguments` fields the run's switch sets for `stage` (`--implementation
    torch_compile_backend=aot_eager`, an alternative), recorded in `hf_settings`; `{}` where
    it sets none or changes another stage."""
    from runners.switches import trainer_arguments, training_switch

    switch = training_switch(ctx.settings.implementation)
    if switch is None or stage.value not in switch.stages:
        return {}
    return trainer_arguments(ctx.settings.implementation)


def quiet(trainer: Any) -> None:
    """The trainer without its `PrinterCallback`: with `disable_tqdm` transformers prints each
    log (the loss of every step) to stdout, which is the command's (`check --format json`
    writes its answer there). The logs stay in `trainer.state.log_history`."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def _settings(ctx: StageContext, **more: Any) -> None:
    """Add `key=value` entries to the row's `hf_settings` (each once)."""
    have = [e for e in (ctx.extra.get("hf_settings") or "").split("; ") if e]
    have += [e for e in (f"{k}={v}" for k, v in more.items()) if e not in have]
    ctx.extra["hf_settings"] = "; ".join(have)


class _HfStage(StageRunner):
    """Shared: the packages checked and the device shown to the libraries in `prepare`; the
    innermost library frame of a failure recorded."""

    packages: ClassVar[tuple[str, ...]] = ("transformers", "accelerate", "datasets")

    def prepare(self, ctx: StageContext) -> None:
        _need(*self.packages)
        if ctx.spec.library != "transformers":
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                f"Hugging Face's trainers train transformers models; this is {ctx.spec.library}",
            )
        ctx.device.present_to_libraries()
        loaded_weights(ctx)  # raises when the loaded model cannot be copied

    def run(self, ctx: StageContext) -> None:
        with library_failure(ctx):
            self.train(ctx)

    def train(self, ctx: StageContext) -> None:
        raise NotImplementedError

    def arguments(
        self,
        ctx: StageContext,
        out: str,
        *,
        cpu: bool = False,
        kind: Any = None,
        batch: int = 1,
        **more: Any,
    ) -> Any:
        """`TrainingArguments` (or its subclass `kind`, such as TRL's `SFTConfig`) as a user
        writes them; on the CPU side `use_cpu=True`. Where the device cannot pin host memory,
        batches are loaded unpinned (and the row says so)."""
        from transformers import TrainingArguments

        pin = ctx.device.pins_host_memory and not cpu
        if not ctx.device.pins_host_memory and not cpu:
            _settings(ctx, dataloader_pin_memory="False (the device cannot pin host memory)")
        return (kind or TrainingArguments)(
            output_dir=out,
            max_steps=self.steps,
            per_device_train_batch_size=batch,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=ctx.seed,
            use_cpu=cpu,
            dataloader_pin_memory=pin,
            disable_tqdm=True,
            **more,
        )

    steps: ClassVar[int] = TRAINER_STEPS


class TrainerStage(_HfStage):
    """`transformers.Trainer`, three steps, then save and load back."""

    name: ClassVar[Stage] = Stage.TRAINER
    compiled: ClassVar[bool] = False

    def train_once(self, ctx: StageContext, out: str, *, cpu: bool = False) -> _TrainerRun:
        from transformers import Trainer

        torch.manual_seed(ctx.seed)
        model = without_dropout(copy.deepcopy(loaded_weights(ctx)))
        dataset, collate = step_batches(ctx, self.steps)
        # the CPU reference is the eager trainer: a compiled step must compute what it computes
        more = {"torch_compile": True} if self.compiled and not cpu else {}
        if not cpu:  # a TrainingArguments switch run as an alternative: the device's side
            more.update(switched_arguments(ctx, self.name))
        reset_accelerate_state()
        args = self.arguments(ctx, out, cpu=cpu, **more)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=collate,
            compute_loss_func=self.loss_function(ctx, model),
            callbacks=[self.callback(ctx)] if not cpu and self.compiled else None,
        )
        quiet(trainer)
        if not cpu and self.compiled:
            _settings(ctx, torch_compile_backend=args.torch_compile_backend)
        watch = self.watch(ctx) if not cpu else contextlib.nullcontext()
        with watch:
            trainer.train()
        if not cpu:
            ctx.device.synchronize()
        return _TrainerRun(trainer, model)

    def loss_function(self, ctx: StageContext, model: torch.nn.Module) -> Any:
        """None where the model computes its own loss from `labels` (what the Trainer uses);
        else the family's loss (the adapter's, as the backward stage computes it), as users
        pass `compute_loss_func`."""
        if "labels" in ctx.cpu_inputs:
            return None
        from model_configs import build

        inputs = ctx.cpu_inputs

        def loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
            return build.compute_loss(ctx.spec, model, outputs, inputs)

        return loss

    @contextlib.contextmanager
    def watch(self, ctx: StageContext) -> Iterator[None]:
        yield

    def callback(self, ctx: StageContext) -> Any:
        return None

    def train(self, ctx: StageContext) -> None:
        with tempfile.TemporaryDirectory(prefix="hfsweep-trainer-") as tmp:
            run = self.train_once(ctx, str(Path(tmp) / "device"))
            if not run.losses or not all(math.isfinite(v) for v in run.losses):
                raise FloatingPointError(f"the trainer's losses are not finite: {run.losses}")
            prove_device(ctx, run)
            check_ties(loaded_weights(ctx), run.model)
            self.save_and_reload(ctx, run, Path(tmp) / "saved")
            if ctx.compare:
                cpu = self.train_once(ctx, str(Path(tmp) / "cpu"), cpu=True)
                compare_with_cpu(ctx, run, cpu)

    def save_and_reload(self, ctx: StageContext, run: _TrainerRun, folder: Path) -> None:
        """`trainer.save_model()`, then `from_pretrained` of the folder: equal weights, and the
        reloaded model's forward (on the device) matches the trained one's."""
        run.trainer.save_model(str(folder))
        model_class: Any = type(run.model)
        loaded = model_class.from_pretrained(str(folder), dtype=ctx.dtype)
        saved = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
        back = {k: v for k, v in loaded.state_dict().items() if k in saved}
        missing = sorted(set(saved) - set(back))
        if missing:
            raise RuntimeError(f"{len(missing)} weights did not load back (first: {missing[0]})")
        different = [k for k, v in saved.items() if not torch.equal(v, back[k])]
        if different:
            raise RuntimeError(
                f"{len(different)} weights differ after save_model and from_pretrained "
                f"(first: {different[0]})"
            )
        loaded = ctx.device.prepare_model(without_dropout(loaded).eval())
        run.model.eval()
        with torch.no_grad():
            expected = run.model(**ctx.inputs)
            actual = loaded(**ctx.inputs)
        check_close("the reloaded model's forward", expected, actual, ctx)


class CompiledTrainerStage(TrainerStage):
    """The same with `torch_compile=True` (the backend transformers picks for the device)."""

    name: ClassVar[Stage] = Stage.TRAINER_COMPILED
    compiled: ClassVar[bool] = True

    @contextlib.contextmanager
    def watch(self, ctx: StageContext) -> Iterator[None]:
        """Count the frames Dynamo compiles again after the first step's."""
        import torch._dynamo as dynamo
        from torch._dynamo.utils import counters

        dynamo.reset()
        counters.clear()
        seen: dict[str, Any] = {}
        try:
            with ctx.device.compiling() as seen:
                yield
        finally:
            ctx.extra.update(seen)
            ctx.extra["graph_count"] = int(counters["stats"].get("unique_graphs", 0))
            ctx.extra["graph_break_count"] = int(sum(counters["graph_break"].values()))
            first = ctx.extra.pop("first_step_graphs", None)
            if first is not None:
                ctx.extra["recompile_count"] = ctx.extra["graph_count"] - first
            dynamo.reset()

    def callback(self, ctx: StageContext) -> Any:
        """A `TrainerCallback` that notes the graphs compiled by the end of the first step."""
        from torch._dynamo.utils import counters
        from transformers import TrainerCallback

        class FirstStep(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if state.global_step == 1:
                    graphs = int(counters["stats"].get("unique_graphs", 0))
                    ctx.extra["first_step_graphs"] = graphs

        return FirstStep()

    def save_and_reload(self, ctx: StageContext, run: _TrainerRun, folder: Path) -> None:
        return None  # what trainer checks; the compiled module saves as the eager one


class SftStage(_HfStage):
    """TRL's `SFTTrainer` with a peft `LoraConfig`, two steps, causal language models only."""

    name: ClassVar[Stage] = Stage.SFT
    packages: ClassVar[tuple[str, ...]] = ("transformers", "accelerate", "datasets", "trl", "peft")
    steps: ClassVar[int] = SFT_STEPS

    def prepare(self, ctx: StageContext) -> None:
        super().prepare(ctx)
        source = loaded_weights(ctx)
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        model_type = peft_model_type(source)
        if type(source).__name__ not in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()):
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                f"SFTTrainer trains causal language models; {type(source).__name__} is not one",
            )
        if model_type not in lora_target_modules():
            raise StageSkipped(
                SkipReason.NOT_APPLICABLE,
                f"peft has no default LoRA target modules for model type {model_type!r}",
            )

    def dataset(self, ctx: StageContext, model: torch.nn.Module) -> tuple[Any, Any]:
        """(the dataset, the tokenizer or None): texts with the family's tokenizer where one
        builds offline from nothing, else token ids."""
        from datasets import Dataset

        tokenizer = offline_tokenizer(model)
        if tokenizer is not None:
            _settings(ctx, sft_data=f"text, {type(tokenizer).__name__}")
            return Dataset.from_dict({"text": list(SFT_TEXTS)}), tokenizer
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        if vocab < 8:
            raise StageSkipped(SkipReason.NOT_APPLICABLE, "the model has no vocabulary size")
        generator = torch.Generator().manual_seed(ctx.seed)
        ids = torch.randint(3, vocab, (len(SFT_TEXTS), 12), generator=generator)
        _settings(ctx, sft_data="token ids (no tokenizer of the family builds offline)")
        return Dataset.from_dict({"input_ids": ids.tolist()}), id_tokenizer(vocab)

    def train_once(self, ctx: StageContext, out: str, *, cpu: bool = False) -> _TrainerRun:
        from peft import LoraConfig
        from trl import SFTConfig, SFTTrainer

        torch.manual_seed(ctx.seed)
        model = without_dropout(copy.deepcopy(loaded_weights(ctx)))
        dataset, tokenizer = self.dataset(ctx, model)
        reset_accelerate_state()
        args = self.arguments(ctx, out, cpu=cpu, kind=SFTConfig, batch=2, max_length=32, bf16=False)
        torch.manual_seed(ctx.seed)  # the adapters' initial weights
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0),
        )
        quiet(trainer)
        trainer.train()
        if not cpu:
            ctx.device.synchronize()
        return _TrainerRun(trainer, trainer.model)

    def train(self, ctx: StageContext) -> None:
        with tempfile.TemporaryDirectory(prefix="hfsweep-sft-") as tmp:
            run = self.train_once(ctx, str(Path(tmp) / "device"))
            if not run.losses or not all(math.isfinite(v) for v in run.losses):
                raise FloatingPointError(f"the trainer's losses are not finite: {run.losses}")
            trainable = [n for n, p in run.model.named_parameters() if p.requires_grad]
            if not trainable or any("lora_" not in n for n in trainable):
                raise RuntimeError("SFTTrainer did not train the LoRA adapters alone")
            prove_device(ctx, run)
            if ctx.compare:
                cpu = self.train_once(ctx, str(Path(tmp) / "cpu"), cpu=True)
                compare_with_cpu(ctx, run, cpu)


def offline_tokenizer(model: torch.nn.Module) -> Any:
    """The family's fast tokenizer class built with no file, where it can be (a byte-level BPE
    with an empty vocabulary and merges, as GPT-2's and Qwen2's), with a pad token; else None.
    Its vocabulary then fits the tiny model (256 byte tokens)."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    model_type = getattr(model.config, "model_type", None)
    names = TOKENIZER_MAPPING_NAMES.get(model_type or "")
    name = names[-1] if isinstance(names, tuple) else names
    if not name:
        return None
    try:
        import transformers

        cls = getattr(transformers, name)
        tokenizer = cls()
    except Exception:  # the class needs a vocabulary file: token ids instead
        return None
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    if len(tokenizer) > vocab or len(tokenizer(SFT_TEXTS[0])["input_ids"]) < 4:
        return None  # built, but empty: it needs its vocabulary files
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer if tokenizer.pad_token is not None else None


def id_tokenizer(vocab_size: int) -> Any:
    """A word-level fast tokenizer whose tokens are the ids themselves (`<7>` is 7), for a
    dataset of token ids: TRL pads and ends sequences with its pad and eos tokens (0 and 1)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<{i}>": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<2>")),
        pad_token="<0>",
        eos_token="<1>",
        unk_token="<2>",
    )
