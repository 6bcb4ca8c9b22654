"""Words of the pages a newcomer cannot look up elsewhere, each with a short explanation: the
tooltip (`title`) where the word appears on the dashboard and the static site, the glossary
page of each (`/docs`, `glossary.html`) and docs/glossary.md, which says the same
(tests/test_glossary.py holds them together)."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

GLOSSARY: dict[str, str] = {
    "evidence of absence": (
        "The op is known not to run on the device: it fell back to the CPU, or a failure names "
        "it (the device has no kernel for it, or its code raises)."
    ),
    "absence of evidence": (
        "Nothing decides whether the device lowers the op: only a compiler took it to lower, "
        "with no kernel list, test or lowering table saying either way. The models pass unless "
        "it fails; coverage is shown as a band (with evidence / at most)."
    ),
    "newer than the profile": (
        "The op (or collective) is one the torch the device's profile was written for did not "
        "have (the emulated neuron profile: torch 2.10; the rows run on a newer torch): the "
        "profile cannot say what the device does with it, so its verdict is unverified, counted "
        "in the band's upper end, never a fact about the device."
    ),
    "renamed_since_profile": (
        "Evidence of a collective the running torch calls by a newer name that torch itself "
        "declares equivalent to one the profile implements (all_gather_single for "
        "_allgather_base): the profile's implementation ran, with its limits, under the new name."
    ),
    "only obstacle": (
        "Models that passed every stage with this op as their only CPU fallback: lowering it "
        "makes them run entirely on the device."
    ),
    "dl on device if lowered": (
        "The downloads of the 'only obstacle' models: what would run entirely on the device if "
        "this one op were lowered."
    ),
    "name_mapped": (
        "Where a config came from: a repackaged single file (ComfyUI) whose repo has no config, "
        "mapped by its name to the diffusers class that loads such files and built from that "
        "class's defaults, not the repo's own config."
    ),
    "PrivateUse1": (
        "PyTorch's dispatch key for an out-of-tree device backend; TorchNeuron registers the "
        "'neuron' device through it."
    ),
    "h2d / d2h": (
        "Bytes copied host to device and device to host during a stage (a CPU fallback moves "
        "its inputs to the host and its outputs back)."
    ),
    "OpInfo": (
        "PyTorch's own description of an operator for its test suite, with sample inputs; "
        "`hfsweep ops` runs those samples on the device against the CPU."
    ),
    "partial": (
        "A model outcome: nothing failed, but a stage was skipped for a reason of the device "
        "(a feature it lacks), so it did not pass every stage either."
    ),
    "on_device": (
        "A models-table filter: the models that passed every stage with no CPU fallback, "
        "entirely on the device."
    ),
    "with_fallback": (
        "A models-table filter: the models that passed every stage with at least one op "
        "falling back to the CPU."
    ),
    "no config of its own": (
        "The model was built from its library's default config for its architecture (offline, "
        "the bundled catalog holds no config files): a size computed from it is the default's, "
        "not the model's, so the model counts as not sized."
    ),
}


# A word of the glossary to its anchor on the glossary page (`evidence-of-absence`).
def anchor(term: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")


def explain(term: str) -> str:
    """The explanation of `term` ("" where the glossary has none): a tooltip's text."""
    return GLOSSARY.get(str(term).strip(), "")


_DOC = re.compile(r"docs/([a-z0-9-]+)\.md")


def doc_links(text: str, base: str) -> Markup:
    """`text` escaped, with each `docs/NAME.md` it names a link to `base + NAME.md` (the
    dashboard's `/docs/`, the static site's `docs/`)."""
    out, last = [], 0
    for m in _DOC.finditer(str(text)):
        out.append(escape(text[last : m.start()]))
        out.append(Markup('<a class="doc" href="{}{}.md">{}</a>').format(base, m[1], m[0]))
        last = m.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)
