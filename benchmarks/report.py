"""Turn a benchmark's JSON result into Markdown tables for the docs.

    python benchmarks/report.py results/allreduce.json
    python benchmarks/report.py results/admm_lasso.json
"""
import json
import sys


def human(nbytes):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{nbytes} B"


def allreduce_tables(result):
    names = list(dict.fromkeys(row["reducer"] for row in result["rows"]))
    by_size = {}
    for row in result["rows"]:
        by_size.setdefault(row["size"], {})[row["reducer"]] = row
    fitted = result["fitted"]
    lines = [f"{result['ranks']} ranks, {result['nodes']} node(s), {result['datatype']} {result['op']}; "
             f"fitted alpha = {fitted['alpha'] * 1e6:.2f} us, beta = {fitted['beta'] * 1e9:.3f} ns/B, "
             f"gamma = {fitted['gamma'] * 1e9:.3f} ns/B, copy = {fitted['copy'] * 1e9:.3f} ns/B; "
             f"#wrong in total: {result['summary']['wrong']}", "",
             "busbw in GB/s, and in brackets the speed relative to MPI_Allreduce in the same run "
             "(MPI's time / this reducer's time):", "",
             "| size | MPI time (us) | " + " | ".join(names) + " |",
             "|---:|---:|" + "---:|" * len(names)]
    for size, rows in sorted(by_size.items()):
        cells = [f"{rows[name]['busbw']:.2f} ({rows[name]['vs_mpi']:.2f}x)" if name in rows else "-" for name in names]
        lines.append(f"| {human(size)} | {rows['mpi']['time_us']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Targets:"]
    for key, entry in result["summary"]["targets"].items():
        if "median" in entry:
            lines.append(f"- {key}: median {entry['median']:.2f}x, worst {entry['min']:.2f}x (target >= {entry['target']}x)")
        else:
            lines.append(f"- {key}: {entry['value']:.2f}x MPI's latency (target <= {entry['target']}x)")
    return "\n".join(lines)


def lasso_tables(result):
    lines = [f"lasso {result['rows']} x {result['cols']}, column correlation {result.get('correlation', 0)}, "
             f"{result['ranks']} ranks, lam = {result['lam']:.4g} ({result['lam'] / result['lambda_max']:g} lambda_max), "
             f"median of {result['repeat']}; reference objective {result['reference_objective']:.12e}", "",
             "| solver | tolerance | iterations | time (s) | relative gap |", "|---|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(f"| {run['solver']} | {run['tolerance']:.0e} | {run['iterations']} | {run['seconds']:.3f} | "
                     f"{run['relative_gap']:.1e} |")
    admm = result["time_to_solution"]["mpiopt ADMM"]["seconds"]
    lines += ["", f"Time to solution (relative gap <= {result['target']:g}):", "",
              "| solver | time (s) | at tolerance | ADMM time / this |", "|---|---:|---:|---:|"]
    for solver, entry in result["time_to_solution"].items():
        if entry["seconds"] is None:
            lines.append(f"| {solver} | not reached | | |")
        else:
            ratio = f"{admm / entry['seconds']:.2f}" if admm else "-"
            lines.append(f"| {solver} | {entry['seconds']:.3f} | {entry['tolerance']:.0e} | {ratio} |")
    per = result["per_iteration"]
    lines += ["", f"Per iteration ({per['iterations']} iterations): ADMM {per['admm'] * 1e3:.3f} ms; floor "
              f"(cached-factor solve + allreduce of n doubles) {per['floor'] * 1e3:.3f} ms; ratio {per['ratio']:.2f} "
              f"(target <= 1.5)"]
    return "\n".join(lines)


def main(paths):
    for path in paths:
        with open(path) as stream:
            result = json.load(stream)
        print(allreduce_tables(result) if result["benchmark"] == "allreduce" else lasso_tables(result))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
