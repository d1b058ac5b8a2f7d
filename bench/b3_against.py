"""B3, side by side with an earlier revision: this tree's scrape and parse vs the same code as it
was at REV (`runtime/exposition/`, or `runtime/metrics.py` before that package; read with
`git show`, loaded under another name), on the same servers.

Rounds alternate which goes first. Reports the median wall time of one `scrape_many` call over
the endpoints and the best `parse_exposition` time per Ray and vLLM exposition, each as new ÷ old.

    .venv/bin/python bench/b3_against.py REV [--endpoints 300] [--mix ray] [--rounds 4]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FIXTURES, ROOT, header, row  # noqa: E402
from b3_metrics import MIXES, RAY, SERVERS, VLLM, start_servers  # noqa: E402


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def load_revision(rev: str):
    """The module at REV with `scrape_many` and `parse_exposition`, importable beside this tree's."""
    folder = Path(tempfile.mkdtemp(prefix="b3-against-"))
    sys.path.insert(0, str(folder))
    if _git("ls-tree", "--name-only", rev, "runtime/metrics.py").strip():  # before runtime/exposition/
        (folder / "metrics_at_rev.py").write_text(_git("show", f"{rev}:runtime/metrics.py"))
        return importlib.import_module("metrics_at_rev")
    package = folder / "exposition_at_rev"
    package.mkdir()
    for path in _git("ls-tree", "--name-only", f"{rev}:runtime/exposition/").split():
        # Its modules import each other as runtime.exposition.*, which is this tree's copy.
        text = _git("show", f"{rev}:runtime/exposition/{path}").replace("runtime.exposition", "exposition_at_rev")
        (package / path).write_text(text)
    return importlib.import_module("exposition_at_rev.sources")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rev")
    parser.add_argument("--endpoints", type=int, default=300)
    parser.add_argument("--mix", default="ray", choices=sorted(MIXES))
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if not FIXTURES.is_dir():
        raise SystemExit(f"{FIXTURES} is missing (the real expositions live in ../shared)")
    sys.path.insert(0, str(ROOT))
    from runtime.exposition import sources as new  # scrape_many, and the parse_exposition it uses

    old = load_revision(args.rev)
    header(f"B3 against {args.rev}")
    for name in RAY[:1] + VLLM[:1]:
        text = (FIXTURES / name).read_text()
        best = {}
        for label, module in (("old", old), ("new", new)):
            runs = timeit.repeat(lambda m=module, t=text: m.parse_exposition(t, 0.0), number=10, repeat=7)
            best[label] = min(runs) / 10
        row(
            f"parse_exposition, {name}",
            f"new {best['new'] * 1e3:.1f} ms vs old {best['old'] * 1e3:.1f} ms: ratio {best['new'] / best['old']:.2f}x",
        )

    servers = start_servers()
    targets = {i: f"http://127.0.0.1:{servers[i % SERVERS][1]}/{args.mix}/{i}/metrics" for i in range(args.endpoints)}
    walls: dict[str, list[float]] = {"old": [], "new": []}
    for n in range(args.rounds):
        for label in ("old", "new") if n % 2 == 0 else ("new", "old"):
            module = old if label == "old" else new
            started = time.perf_counter()
            results = module.scrape_many(targets)
            walls[label].append(time.perf_counter() - started)
            errors = sum(isinstance(r, Exception) for r in results.values())
            if errors:
                raise SystemExit(f"{label}: {errors} endpoints failed")
    median = {label: statistics.median(times) for label, times in walls.items()}
    row(
        f"scrape_many, {args.endpoints} endpoints, mix '{args.mix}', median of {args.rounds}",
        f"new {median['new']:.2f} s vs old {median['old']:.2f} s: ratio {median['new'] / median['old']:.2f}x",
    )


if __name__ == "__main__":
    main()
