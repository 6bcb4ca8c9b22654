"""Every rendered output of the tests' hand-built stores, written to a folder, so that two
commits' outputs can be compared with `diff -r` (a change of the reading side that should
render the same).

For each run of the hand, pages, dtypes, fine-tuning, sharding and Hugging Face training
stores: the report as text, markdown and JSON, `lookup`'s text of every model, and every model
page as `model_details` and as `model_detail` build it (JSON). The stores' own paths are
written as `STORE`.

    python bench/reading_outputs.py OUT
    # another commit's: its tree from `git archive`, run with PYTHONPATH set to it
    git archive REV | tar -x -C /tmp/rev && (cd /tmp/rev && PYTHONPATH=. python bench/reading_outputs.py /tmp/out-rev)
    diff -r /tmp/out-rev OUT
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path.cwd()
sys.path.insert(0, str(REPO))


def stores(tmp: Path) -> dict[str, str]:
    """name -> root of each hand-built store."""
    import tests.test_fine_tune_report as fine_tune
    import tests.test_hf_stack_report as hf_stack
    import tests.test_sharding_report as sharding
    from tests.dtype_store_builder import build_dtype_store
    from tests.page_store_builder import build_pages_store
    from tests.report_store_builder import build_hand_store

    roots = {
        "hand": build_hand_store(tmp / "hand").root,
        "pages": build_pages_store(tmp / "pages").root,
        "dtype": build_dtype_store(tmp / "dtype").root,
    }
    for name, module in (("sharding", sharding), ("hf", hf_stack)):
        path = tmp / name / "store"
        path.parent.mkdir()
        module.build_store(path)
        roots[name] = str(path)

    class Factory:  # what the fine-tuning fixture asks of pytest's tmp_path_factory
        def mktemp(self, name: str) -> Path:
            path = tmp / f"fine-{name}"
            path.mkdir()
            return path

    roots["fine"] = str(fine_tune.store_root.__wrapped__(Factory()))
    return roots


def main() -> None:
    from reports.models import model_detail, model_details
    from reports.query import StoreQuery
    from reports.render import jsondoc, markdown, text
    from reports.store import Store
    from reports.summary import run_report
    from sweep.commands.lookup import render_text

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, root in stores(Path(tmp)).items():
            q = StoreQuery(Store(root))
            q.ensure_all_summaries()  # the models of a run are read from its summary
            for run in q.run_ids():
                ids = [
                    r["model_id"]
                    for r in q.fetch(
                        "SELECT DISTINCT model_id FROM model_runs WHERE run_id = $run ORDER BY 1",
                        {"run": run},
                    )
                ]
                report = run_report(q, run)
                pages = model_details(q, run, ids)
                one = {m: model_detail(q, m, run) for m in ids}
                written = {
                    "txt": text.render(report),
                    "md": markdown.render(report),
                    "json": jsondoc.render(report),
                    "lookup.txt": "".join(render_text(d) + "\n=====\n" for d in one.values() if d),
                    "details.json": jsondoc.render({m: pages[m] for m in sorted(pages)}),
                    "detail.json": jsondoc.render({m: d for m, d in sorted(one.items()) if d}),
                }
                for suffix, body in written.items():
                    (out / f"{name}-{run}.{suffix}").write_text(body.replace(str(root), "STORE"))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
