"""Turn a benchmark's JSON result into Markdown tables for the docs.

    python benchmarks/report.py results/allreduce.json results/admm_lasso.json results/admm_logistic.json

Each benchmark writes its name in the JSON ("benchmark"); the renderer is
chosen by that name, and a name without a renderer is an error, not a guess.
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


def ladder_tables(result, title):
    """A tolerance ladder (solver, tolerance, iterations, time, gap) and the time to solution."""
    lines = [title, "", "| solver | tolerance | iterations | time (s) | relative gap |", "|---|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(f"| {run['solver']} | {run['tolerance']:.0e} | {run['iterations']} | {run['seconds']:.3f} | "
                     f"{run['relative_gap']:.1e} |")
    lines += ["", "| solver | time to solution (s) | at tolerance |", "|---|---:|---:|"]
    for solver, entry in result["time_to_solution"].items():
        lines.append(f"| {solver} | {entry['seconds']:.3f} | {entry['tolerance']:.0e} |" if entry["seconds"]
                     else f"| {solver} | not reached | |")
    return "\n".join(lines)


def logistic_tables(result):
    return ladder_tables(result, f"L1 logistic regression {result['rows']} x {result['cols']}, {result['ranks']} ranks, "
                                 f"lam = {result['lam']:.4g}; best objective {result['best_objective']:.12e}")


def path_tables(result):
    lines = [f"lasso path {result['rows']} x {result['cols']}, {result['ranks']} ranks, {len(result['lams'])} weights: "
             f"mpiopt {result['seconds']:.2f} s ({result['setup']:.2f} s setup)", "",
             "| scikit-learn lasso_path | time (s) | mpiopt / this | worst relative objective gap |",
             "|---|---:|---:|---:|"]
    for layout, entry in result["lasso_path"].items():
        lines.append(f"| {layout} | {entry['seconds']:.2f} | {result['seconds'] / entry['seconds']:.2f} | "
                     f"{entry['max_relative_gap']:.1e} |")
    return "\n".join(lines)


def rho_tables(result):
    lines = [f"adaptive rho, {result['rows']} x {result['cols']}, {result['ranks']} ranks; default rho "
             f"{result['default_rho']:.3e}", "",
             "| Anderson | best fixed rho | its iterations | osqp from 100x too small | balance | default settings |",
             "|---|---:|---:|---:|---:|---:|"]
    for key in ("anderson_0", "anderson_5"):
        entry = result[key]
        adaptive = entry["adaptive"]
        lines.append(f"| {key.split('_')[1]} | {entry['best_rho']:.3e} | {entry['best_iterations']} | "
                     f"{adaptive['osqp']['iterations']} ({adaptive['osqp']['ratio']:.2f}x) | "
                     f"{adaptive['balance']['iterations']} ({adaptive['balance']['ratio']:.2f}x) | "
                     f"{entry['default_iterations']} |")
    return "\n".join(lines)


def compression_tables(result):
    codec, allreduce, training, predictions = (result["codec"], result["allreduce"], result["training"],
                                               result["predictions"])
    biggest = max(row["bytes"] for row in codec)
    lines = [f"Compressors on {human(biggest)} of float32 (one core; median of {result['repeat']}; measured):", "",
             "| compressor | fewer bytes | compress (GB/s) | decompress (GB/s) | both (GB/s) |", "|---|---:|---:|---:|---:|"]
    for row in codec:
        if row["bytes"] == biggest:
            lines.append(f"| {row['compressor']} | {row['ratio']:.1f}x | {row['bytes'] / row['compress_s'] / 1e9:.2f} | "
                         f"{row['bytes'] / row['decompress_s'] / 1e9:.2f} | {row['throughput_gbs']:.2f} |")
    mpi = allreduce[0]["seconds"]
    lines += ["", f"One all-reduce of {human(result['allreduce_bytes'])} of float32 over {result['ranks']} ranks "
              f"(median of {result['repeat']}; measured here, where ranks share memory):", "",
              "| reducer | time (ms) | MPI's time / this | bytes sent (rank 0) |", "|---|---:|---:|---:|"]
    for row in allreduce:
        sent = "" if row["bytes_sent"] is None else str(row["bytes_sent"])
        lines.append(f"| {row['reducer']} | {row['seconds'] * 1e3:.2f} | {mpi / row['seconds']:.2f} | {sent} |")
    runs, base = training["runs"], training["runs"][0]
    lines += ["", f"Training {training['model']} ({training['n_params']} parameters) on digits, Adam, "
              f"{training['epochs']} epochs, global batch {training['batch_size']}, {result['ranks']} ranks (measured):",
              "", "| compressor | final loss | vs none | train accuracy | test accuracy | bytes sent | fewer bytes |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        lines.append(f"| {run['compressor']} | {run['loss']:.5f} | {run['loss'] / base['loss']:.3f}x | "
                     f"{run['accuracy']:.4f} | {run['test_accuracy']:.4f} | {run['bytes_sent']} | "
                     f"{base['bytes_sent'] / max(run['bytes_sent'], 1):.1f}x |")
    networks, ranks = result["networks_gbps"], result["predicted_ranks"]
    lines += ["", f"Predicted time per step (predicted, not measured: the measured compute per step plus the "
              f"alpha-beta model of the {training['n_params']}-parameter float64 gradient, with the latency fitted "
              "here and the link's bandwidth):", "",
              "| compressor | path | " + " | ".join(f"{g} Gb/s, {p} ranks" for g in networks for p in ranks) + " |",
              "|---|---|" + "---:|" * (len(networks) * len(ranks))]
    for run in runs:
        rows = [row for row in predictions if row["compressor"] == run["compressor"]]
        lines.append(f"| {run['compressor']} | {rows[0]['path']} | "
                     + " | ".join(f"{row['step_s'] * 1e3:.2f} ms" for row in rows) + " |")
    return "\n".join(lines)


def train_tables(result):
    p, memory = result["ranks"], result["memory"]
    base = memory[0]["model_states_bytes"]
    lines = [f"{result['model']} ({result['n_params']} parameters), Adam, {p} ranks (measured): peak bytes per rank", "",
             "| ZeRO stage | parameters | gradients | optimizer state | model states | vs stage 0 | buffers |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in memory:
        lines.append(f"| {row['stage']} | {row['params_bytes']} | {row['gradients_bytes']} | "
                     f"{row['optimizer_state_bytes']} | {row['model_states_bytes']} | "
                     f"{row['model_states_bytes'] / base:.3f} | {row['buffers_bytes']} |")
    lines += ["", f"Overlap, {result['buckets']} buckets of {human(result['bucket_bytes'])}, {result['steps']} steps, "
              f"median of {result['repeat']} (measured):", "",
              "| reducer | overlap | train (s) | communication (s) | exposed (s) | hidden | hidden, first half of the "
              "buckets to fill (last layers) | hidden, second half |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["overlap"]:
        first, second = row["bucket_hidden_fraction"]
        lines.append(f"| {row['reducer']} | {'on' if row['overlap'] else 'off'} | {row['train_s']:.3f} | "
                     f"{row['communication_s']:.3f} | {row['exposed_s']:.3f} | {row['hidden_fraction']:.0%} | "
                     f"{first:.0%} | {second:.0%} |")
    return "\n".join(lines)


def federated_tables(result):
    table, prox = result["table2"], result["fedprox"]
    rows_per_client = table["train_rows"] / table["clients"]
    lines = [f"FedAvg against FedSGD on digits (McMahan et al. 2017, Table 2 at small scale): {table['model']} "
             f"({table['n_params']} parameters), {table['clients']} clients (about {rows_per_client:.0f} training rows "
             f"each), C = {table['fraction']}, {result['ranks']} ranks; rounds until the test accuracy "
             f"({table['test_rows']} rows) first reaches the target, capped at {table['cap']} (measured; "
             "'-' not reached), beside the paper's MNIST CNN rounds to 99%:", "",
             "| data (target) | method | E | B here | B paper | lr | rounds | speedup vs FedSGD | paper CNN rounds | "
             "paper speedup |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for split in dict.fromkeys(row["split"] for row in table["rows"]):
        rows = [row for row in table["rows"] if row["split"] == split]
        base, paper_base = rows[0]["rounds"], rows[0]["paper_cnn_rounds"]
        for row in rows:
            speedup = f"{base / row['rounds']:.1f}x" if base and row["rounds"] else "-"
            paper = row["paper_cnn_rounds"]
            paper_speedup = f"{paper_base / paper:.1f}x" if paper and paper_base else "-"
            lines.append(f"| {split} ({row['target']}) | {row['label']} | {row['E']} | {row['B'] or 'all'} | "
                         f"{row['paper_B'] or 'inf'} | {row['lr']:g} | {row['rounds'] or '-'} | {speedup} | "
                         f"{paper or 'see the paper'} | {paper_speedup} |")
    rates = sorted({entry["lr"] for row in table["rows"] for entry in row["lr_grid"]})
    lines += ["", "Rounds to the target at each learning rate of the grid (the table above takes each row's best; "
              "'-' not reached, blank not tried):", "",
              "| data | method | E | B here | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
              "|---|---|---:|---:|" + "---:|" * len(rates)]
    for row in table["rows"]:
        tried = {entry["lr"]: entry["rounds"] for entry in row["lr_grid"]}
        cells = [(str(tried[lr] or "-") if lr in tried else "") for lr in rates]
        lines.append(f"| {row['split']} | {row['label']} | {row['E']} | {row['B'] or 'all'} | "
                     + " | ".join(cells) + " |")
    rounds = [point["round"] for point in prox["runs"][0]["curve"]]
    lines += ["", f"FedProx's straggler experiment (Li et al. 2020, Figure 1) on Synthetic(1, 1): {prox['clients']} "
              f"clients ({prox['rows']} rows), softmax regression, {prox['per_round']} clients a round, "
              f"E = {prox['epochs']}, B = {prox['batch_size']}, lr = {prox['lr']}; training loss over every client's "
              "rows after the round (measured):", "",
              "| stragglers | method | " + " | ".join(f"round {r}" for r in rounds)
              + " | training accuracy | straggler updates dropped | failed |",
              "|---:|---|" + "---:|" * (len(rounds) + 3)]
    for run in prox["runs"]:
        losses = " | ".join("diverged" if point["loss"] is None else f"{point['loss']:.4f}" for point in run["curve"])
        accuracy = "-" if run["accuracy"] is None else f"{run['accuracy']:.4f}"
        lines.append(f"| {run['stragglers']:.0%} | {run['label']} | {losses} | {accuracy} | "
                     f"{run['dropped_updates']} | {run['failed']} |")
    return "\n".join(lines)


RENDERERS = {"allreduce": allreduce_tables, "admm_lasso": lasso_tables, "admm_general-logistic": logistic_tables,
             "admm_general-path": path_tables, "admm_general-rho": rho_tables, "compression": compression_tables,
             "train": train_tables, "federated": federated_tables}


def render(result):
    name = result.get("benchmark")
    if name not in RENDERERS:
        raise SystemExit(f"report: no table for benchmark {name!r}; known: {', '.join(RENDERERS)}")
    return RENDERERS[name](result)


def main(paths):
    for path in paths:
        with open(path) as stream:
            print(render(json.load(stream)))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
