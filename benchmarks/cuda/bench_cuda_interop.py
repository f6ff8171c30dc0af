"""Cost of taking a PyTorch CUDA tensor into devbuf, against the
same run's baselines: torch consuming its own tensor through DLPack
(torch.utils.dlpack), and cuda.core's StridedMemoryView where importable.

    DEVBUF_BUILD_DIR=build PYTHONPATH=build/python \
        python3 benchmarks/cuda/bench_cuda_interop.py [--quick] [--json F] [--md F]

Run by scripts/gpu-check.sh. Without PyTorch, a CUDA GPU, or a real
devbuf.cuda device it writes why into the report and exits 0: a benchmark
that cannot run is reported, not failed. Each figure is the best of several
rounds of a timeit loop, in ns per call, the result object dropped (export
released) inside the loop. No figure is checked against anything.
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import timeit

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build"))
if str(BUILD / "python") not in sys.path:
    sys.path.insert(0, str(BUILD / "python"))


def strided_memory_view():
    """cuda.core's StridedMemoryView and the name it was found under, or the
    reason there is none (its module moved between releases)."""
    errors = []
    for mod in ("cuda.core.utils", "cuda.core.experimental.utils"):
        try:
            m = __import__(mod, fromlist=["StridedMemoryView"])
            return m.StridedMemoryView, f"{mod}.StridedMemoryView", None
        except (ImportError, AttributeError) as e:
            errors.append(f"{mod}: {e}")
    return None, None, "; ".join(errors)


def why_not():
    """None if the benchmark can run, else why not."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch is not installed ({e})"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA GPU"
    import devbuf
    try:
        d = devbuf.device("devbuf.cuda:0")
    except devbuf.Error as e:
        return f"devbuf.cuda has no device: {e}"
    if "fake" in d.name.lower():
        return "devbuf.cuda runs over the fake libcuda"
    return None


def bench(quick):
    import torch
    import torch.utils.dlpack as tdl

    import devbuf
    x = torch.empty((1024, 1024), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    number, repeat = (2000, 3) if quick else (20000, 7)
    cases = {
        "devbuf.view(t)": "devbuf.view(t)",
        "devbuf.from_dlpack(t)": "devbuf.from_dlpack(t)",
        "torch.utils.dlpack.from_dlpack(t)": "tdl.from_dlpack(t)",
        "torch.utils.dlpack.to_dlpack(t) (capsule only)": "tdl.to_dlpack(t)",
        "torch.from_dlpack(devbuf.from_dlpack(t)) (round trip)": "torch.from_dlpack(devbuf.from_dlpack(t))",
    }
    env = {"devbuf": devbuf, "torch": torch, "tdl": tdl, "t": x}
    notes = []
    smv, smv_name, smv_why = strided_memory_view()
    if smv is not None:
        # stream_ptr=-1: no synchronisation, as the devbuf calls above on an
        # idle tensor; the constructor's keywords changed across releases.
        for stmt in ("SMV(t, stream_ptr=-1)", "SMV.from_dlpack(t, stream_ptr=-1)"):
            try:
                eval(stmt, {"SMV": smv, "t": x})
            except Exception as e:  # noqa: BLE001 - record any failure, keep going
                notes.append(f"{smv_name}: `{stmt}` failed: {type(e).__name__}: {e}")
                continue
            cases[f"cuda.core {stmt.replace('SMV', 'StridedMemoryView')}"] = stmt
            env["SMV"] = smv
            break
    else:
        notes.append(f"cuda.core StridedMemoryView not importable: {smv_why}")
    timers = {k: timeit.Timer(s, globals=env) for k, s in cases.items()}
    best = {k: float("inf") for k in cases}
    for t in timers.values():
        t.timeit(100)  # warm up
    for _ in range(repeat):  # interleaved, so that load hits every case alike
        for k, t in timers.items():
            best[k] = min(best[k], t.timeit(number) / number * 1e9)
    return {"tensor": "torch.empty((1024, 1024), float32, cuda)", "number": number,
            "repeat": repeat, "ns_per_call": best, "notes": notes,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}


def markdown(res):
    lines = ["## devbuf.view / from_dlpack of a PyTorch CUDA tensor", ""]
    if "skipped" in res:
        return "\n".join(lines + [f"Skipped: {res['skipped']}.", ""])
    base = res["ns_per_call"].get("torch.utils.dlpack.from_dlpack(t)")
    lines += [f"{res['gpu']}, PyTorch {res['torch']}, Python {res['python']}; {res['tensor']}; "
              f"best of {res['repeat']} rounds of {res['number']} calls.", "",
              "| call | ns per call | vs torch.utils.dlpack.from_dlpack |", "|---|---:|---:|"]
    for k, ns in res["ns_per_call"].items():
        lines.append(f"| `{k}` | {ns:.0f} | {ns / base:.2f}x |" if base else f"| `{k}` | {ns:.0f} | |")
    lines += [""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--md", help="write the Markdown table here")
    args = ap.parse_args()
    why = why_not()
    res = {"tool": "bench_cuda_interop", "python": platform.python_version()}
    res.update({"skipped": why} if why else bench(args.quick))
    res.setdefault("python", platform.python_version())
    md = markdown(res)
    print(md)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    if args.md:
        pathlib.Path(args.md).write_text(md)


if __name__ == "__main__":
    main()
