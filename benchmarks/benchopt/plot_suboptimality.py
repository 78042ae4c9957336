"""Relative suboptimality against time from a benchopt result of this benchmark, one panel per setting.

    python benchmarks/benchopt/plot_suboptimality.py RESULT.parquet [MORE.parquet ...] --output docs/img/benchopt_l1.png

P* of a setting (data set, loss, lam_ratio) is the smallest objective any run of any solver reached; a
run's point is ((P(x) - P*) / |P*|, its time), the median over benchopt's repetitions at each tolerance.
Also prints a markdown table: per setting, each solver's first time within --target (1e-6) of P*, the
fastest in bold.
"""
import argparse

import numpy as np


def settings_of(frame):
    import pandas as pd
    frame = frame.copy()
    frame["setting"] = (frame["dataset_name"].str.split("[").str[0] + " | " + frame["p_obj_loss"] + " | "
                        + frame["p_obj_lam_ratio"].astype(str))
    best = frame.groupby("setting")["objective_value"].transform("min")
    frame["suboptimality"] = (frame["objective_value"] - best) / best.abs()
    curves = (frame.groupby(["setting", "solver_name", "stop_val"], sort=False)[["time", "suboptimality"]]
              .median().reset_index())
    return pd.DataFrame(curves)


def first_within(curves, target):
    """{setting: {solver: the fastest time with suboptimality <= target, or None}}."""
    table = {}
    for (setting, solver), group in curves.groupby(["setting", "solver_name"], sort=False):
        reached = group[group["suboptimality"] <= target]
        table.setdefault(setting, {})[solver] = float(reached["time"].min()) if len(reached) else None
    return table


def markdown_table(table):
    """One row per setting, one column per solver: seconds to the target, the fastest in bold."""
    solvers = sorted({solver for times in table.values() for solver in times})
    lines = ["| data set | loss | lam / lambda_max | " + " | ".join(solvers) + " |",
             "|---|---|---:|" + "---:|" * len(solvers)]
    for setting, times in table.items():
        reached = [seconds for seconds in times.values() if seconds is not None]
        cells = []
        for solver in solvers:
            seconds = times.get(solver)
            text = "not reached" if seconds is None else f"{seconds:.3g}"
            cells.append(f"**{text}**" if reached and seconds == min(reached) else text)
        lines.append("| " + " | ".join(setting.split(" | ")) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(curves, path, target, floor=1e-12):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter
    settings = list(dict.fromkeys(curves["setting"]))
    solvers = sorted(set(curves["solver_name"]))
    colors = {solver: f"C{index}" for index, solver in enumerate(solvers)}
    columns = min(4, len(settings))
    rows = -(-len(settings) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for axis, setting in zip(axes.flat, settings):
        for solver, group in curves[curves["setting"] == setting].groupby("solver_name", sort=True):
            group = group.sort_values("stop_val", ascending=False)
            axis.loglog(group["time"], np.maximum(group["suboptimality"], floor), marker="o", markersize=3,
                        color=colors[solver], label=solver)
        axis.axhline(target, color="grey", linewidth=0.8, linestyle="--")
        dataset, loss, ratio = setting.split(" | ")
        axis.set_title(f"{dataset}: {loss}, lam = {ratio} lambda_max", fontsize=9)
        axis.set_xlabel("time (s)")
        axis.set_ylabel("(P(x) - P*) / P*")
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.grid(True, which="major", alpha=0.3)
    for axis in list(axes.flat)[len(settings):]:
        axis.set_visible(False)
    handles = [plt.Line2D([], [], color=colors[solver], marker="o", markersize=3) for solver in solvers]
    figure.legend(handles, solvers, loc="upper center", ncol=len(solvers), fontsize=9)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.4 * rows)))
    figure.savefig(path, dpi=110)


def main(argv=None):
    import pandas as pd
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="benchopt's result files (.parquet or .csv), read as one")
    parser.add_argument("--output", default=None, help="the PNG to write (none: only the table)")
    parser.add_argument("--target", type=float, default=1e-6)
    args = parser.parse_args(argv)
    frame = pd.concat([pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
                       for path in args.results], ignore_index=True)
    curves = settings_of(frame)
    print(markdown_table(first_within(curves, args.target)))
    if args.output:
        plot(curves, args.output, args.target)
        print(f"figure written to {args.output}")


if __name__ == "__main__":
    main()
