"""Timing helpers shared by the benchmarks (import with benchmarks/ on sys.path)."""


def interleaved(cases, repeat):
    """Median of `repeat` rounds; each round runs every case once, so that
    load from other processes hits all cases alike. `cases` maps a name to
    a callable returning one timing; one warm-up call each comes first."""
    runs = {k: [] for k in cases}
    for fn in cases.values():
        fn()
    for _ in range(repeat):
        for k, fn in cases.items():
            runs[k].append(fn())
    return {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
