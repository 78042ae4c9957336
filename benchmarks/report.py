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
    """One busbw table per timing convention (OSU: one call per barrier; back to back: hot buffers), the
    targets, and per convention the ring reducers' ratio to MPI from 1 MiB."""
    names = list(dict.fromkeys(row["reducer"] for row in result["rows"]))
    tables = {}
    for row in result["rows"]:
        tables.setdefault(row.get("convention", "osu"), {}).setdefault(row["size"], {})[row["reducer"]] = row
    fitted = result["fitted"]
    lines = [f"{result['ranks']} ranks, {result['nodes']} node(s), {result['datatype']} {result['op']}; "
             f"fitted alpha = {fitted['alpha'] * 1e6:.2f} us, beta = {fitted['beta'] * 1e9:.3f} ns/B, "
             f"gamma = {fitted['gamma'] * 1e9:.3f} ns/B, copy = {fitted['copy'] * 1e9:.3f} ns/B; "
             f"#wrong in total: {result['summary']['wrong']}"]
    for convention, by_size in tables.items():
        lines += ["", f"{CONVENTION_NAMES.get(convention, convention)}: busbw in GB/s, and in brackets the speed "
                  "relative to MPI_Allreduce in the same run (MPI's time / this reducer's time):", "",
                  "| size | MPI time (us) | " + " | ".join(names) + " |",
                  "|---:|---:|" + "---:|" * len(names)]
        for size, rows in sorted(by_size.items()):
            cells = [f"{rows[name]['busbw']:.2f} ({rows[name]['vs_mpi']:.2f}x)" if name in rows else "-"
                     for name in names]
            lines.append(f"| {human(size)} | {rows['mpi']['time_us']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Targets:"]
    for key, entry in result["summary"]["targets"].items():
        if "median" in entry:
            lines.append(f"- {key}: median {entry['median']:.2f}x, worst {entry['min']:.2f}x (target >= {entry['target']}x)")
        else:
            lines.append(f"- {key}: {entry['value']:.2f}x MPI's latency (target <= {entry['target']}x)")
    for convention, entries in result["summary"].get("vs_mpi_from_1MiB", {}).items():
        for name, entry in entries.items():
            lines.append(f"- {name} vs MPI from 1 MiB, {CONVENTION_NAMES.get(convention, convention)}: median "
                         f"{entry['median']:.2f}x, worst {entry['min']:.2f}x")
    return "\n".join(lines)


CONVENTION_NAMES = {"osu": "OSU (one call per barrier)", "back-to-back": "back to back (hot buffers)"}


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
    """The tables of the parts the run measured: the two papers, the NIID-Bench-style study, the 2NN on MNIST."""
    import federated_study
    parts = [_papers_tables(result)] if "table2" in result else []
    if "niid" in result:
        parts.append("A NIID-Bench-style study (benchmarks/federated_study.py): "
                     + federated_study.niid_tables(result["niid"]))
    if "mcmahan" in result:
        parts.append(federated_study.mcmahan_tables(result["mcmahan"]))
    return "\n\n".join(parts)


def _papers_tables(result):
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


def _number(value, form=".4g"):
    return "-" if value is None else format(value, form)


def _yes(value):
    return "met" if value else "missed"


def async_sgd_tables(result):
    """Per configuration the median time to epsilon of each method beside the prediction; targets; throughput."""
    machine, load = result["machine"], result["machine"]["load_average_1min"]
    lines = [f"Heterogeneous-worker SGD on the {result['problem']} quadratic (L = {result['L']:g}), epsilon = "
             f"{result['epsilon_fraction']:g} ||grad f(x0)||^2, sigma^2 = S epsilon, the theory's default "
             f"parameters, {result['ranks']} ranks on {machine['cores']} cores (1-minute load average "
             f"{load['start']:.1f} at the start, {load['end']:.1f} at the end); median over {result['seeds']} seeds "
             f"of the time to epsilon in compute-time units (measured; '-' not reached within {result['cap']}x the "
             "prediction) beside the predicted time (constants dropped):"]
    targets = []
    for config in result["configs"]:
        unit = f", time unit {config['time_unit'] * 1e3:g} ms" if config.get("time_unit") else ""
        lines += ["", f"{config['name']}: {config['n_workers']} workers, tau {config['tau']}, d = {config['dim']}, "
                      f"S = {config['S']:g}, epsilon = {config['epsilon']:.4g}, m* = {config['predicted']['m_star']}"
                      f"{unit}:", "",
                  "| method | runtime | reached | median time | predicted | measured / predicted | ratio to Rennala | "
                  "predicted ratio | median steps | median gradients | median wall (s) |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for method in result["methods"]:
            for runtime in config["runtimes"]:
                row = config["summary"][runtime]["methods"][method]
                measured = row["median"] / row["predicted"] if row["median"] is not None else None
                lines.append(f"| {method} | {runtime} | {row['reached']}/{len(row['times'])} | "
                             f"{_number(row['median'])} | {row['predicted']:.4g} | {_number(measured, '.3f')} | "
                             f"{_number(row['ratio'], '.2f')} | {row['predicted_ratio']:.2f} | {row['steps']:g} | "
                             f"{row['gradients']:g} | {row['wall_s']:.2f} |")
        overhead = config["summary"].get("mpi_over_simulator")
        if overhead:
            lines += ["", "MPI's median time to epsilon over the simulator's (same workers and seeds): " + ", ".join(
                f"{method} {_number(value, '.3f')}" for method, value in overhead.items())]
        for runtime in config["runtimes"]:
            targets.append((config["name"], runtime, config["summary"][runtime]))
    ratio_keys = list(dict.fromkeys(key for _, _, s in targets for key in s["targets"] if "ratio" in key))
    header = ["configuration", "runtime", "T_R <= T_A <= T_MB", "T_RM <= T_A"] + [
        f"{key.split('_')[0]} / rennala within {result['ratio_factor']:g}x of predicted" for key in ratio_keys]
    lines += ["", "Targets (measured medians; the times are T_R, T_A, T_MB and T_RM, T_A):", "",
              "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, runtime, summary in targets:
        t = {m: _number(summary["methods"][m]["median"], ".4g") for m in result["methods"]}
        cells = []
        for key in ratio_keys:
            method = key.split("_")[0]
            row = summary["methods"][method]
            cells.append(f"{_yes(summary['targets'][key])} ({_number(row['ratio'], '.2f')} vs "
                         f"{row['predicted_ratio']:.2f})" if key in summary["targets"] else "")
        lines.append(f"| {name} | {runtime} | {_yes(summary['targets']['ordering'])} ({t['rennala']}, {t['asgd']}, "
                     f"{t['minibatch']}) | {_yes(summary['targets']['ringmaster_le_asgd'])} ({t['ringmaster']}, "
                     f"{t['asgd']}) |" + "".join(f" {cell} |" for cell in cells))
    throughput = result.get("throughput")
    if throughput:
        target = throughput.get("target_s", 60.0)  # JSON written before 2026-12-03 has no target_s: it was held to a minute
        lines += ["", f"Simulator throughput: {throughput['n_workers']} workers, tau sqrt, d = {throughput['dim']}, "
                      f"S = {throughput['S']:g}, {throughput['gradients']} gradient events per method, one core "
                      f"(measured; target: at most {target:g} s):", "",
                  "| method | events | steps | evaluations | wall (s) | CPU (s) | events / s | events / CPU s | "
                  f"within {target:g} s |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in throughput["rows"]:
            within = row.get("within_target", row.get("under_a_minute"))
            lines.append(f"| {row['method']} | {row['gradients']} | {row['steps']} | {row['evaluations']} | "
                         f"{row['wall_s']:.1f} | {row['cpu_s']:.1f} | {row['events_per_s']:,.0f} | "
                         f"{row['events_per_cpu_s']:,.0f} | {_yes(within)} |")
        plain = throughput.get("plain_heapq")  # JSON written before 2026-12-07 has no reference loop
        if plain:
            lines += ["", f"A plain heapq loop of Asynchronous SGD on the same problem and workers (the reference point; "
                          f"median of {throughput['repeats']}): {plain['wall_s']:.1f} s ({plain['cpu_s']:.1f} s of CPU)."]
        if throughput.get("extra"):
            lines += ["", f"The communication-aware methods, {throughput['extra_gradients']} gradient events each (the graph "
                          "methods on a mesh of fewer workers), one core:", "",
                      "| method | problem | workers | timing | events | steps | wall (s) | events / s | "
                      "10^6 events at this rate (s) |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
            for row in throughput["extra"]:
                lines.append(f"| {row['method']} | {row['problem']} | {row['n_workers']} | {row['timing']} | "
                             f"{row['gradients']} | {row['steps']} | {row['wall_s']:.1f} | "
                             f"{row['events_per_s']:,.0f} | {1e6 / row['events_per_s']:,.0f} |")
    return "\n".join(lines)


def _status(met):
    return "not measured" if met is None else "met" if met else "missed"


def _size_table(rows, key, cell, first_header):
    """Rows of ``key`` against the sizes measured, each cell ``cell(row)``; a failed one says so."""
    sizes = sorted({row["bytes"] for row in rows})
    lines = [f"| {first_header} | " + " | ".join(human(size) for size in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name in dict.fromkeys(row[key] for row in rows):
        by_size = {row["bytes"]: row for row in rows if row[key] == name}
        cells = [("failed" if "error" in by_size[size] else cell(by_size[size])) if size in by_size else "-"
                 for size in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def kernels_tables(result):
    """The kernels' bandwidth (GPU: against the device's peak), the lasso on GPU against CPU, the compressors."""
    gpu, host = result.get("gpu"), result.get("host") or {}
    where = f"host {host.get('cpu', '?')}, {host.get('cores', '?')} cores"
    if gpu is None and "kernels" not in result and "compressors" not in result and "lasso" not in result:
        return f"Kernels: no GPU here ({result.get('reason')}); the GPU numbers are pending. {where}."
    if gpu is None:
        lines = [f"Kernels on the CPU only: the numpy twins, median of {result['repeat']} batches "
                 f"({where}); the GPU numbers are pending."]
    else:
        peak = f"peak {gpu['peak_gbs']:.0f} GB/s" if gpu.get("peak_gbs") else "peak unknown"
        lines = [f"Kernels on {gpu['name']} (compute capability {gpu['compute_capability']}, {peak} = "
                 f"{gpu.get('peak_formula')}, from {gpu.get('peak_source')}; CuPy {gpu.get('cupy')}, CUDA runtime "
                 f"{gpu.get('cuda_runtime')}), {where}; median of {result['repeat']} batches, CUDA events."]
    kernels = result.get("kernels", [])
    on_gpu = [row for row in kernels if row["backend"] == "cupy"]
    on_cpu = [row for row in kernels if row["backend"] == "numpy"]
    if on_gpu:
        lines += ["", "GPU kernels: effective bandwidth (bytes read + written / time) in GB/s and as a fraction of "
                  "the peak; sizes are the input vector's bytes (float32; float64 for the ADMM kernels; "
                  "Top-K and scatter-add are not streaming kernels):", ""]
        lines += _size_table(on_gpu, "kernel", lambda row: f"{row['gbs']:.0f} ({row['fraction_of_peak']:.0%})"
                             if row.get("fraction_of_peak") is not None else f"{row['gbs']:.0f}", "kernel")
    if on_cpu:
        lines += ["", "numpy twins on the CPU of the same machine: effective bandwidth in GB/s (the same bytes):", ""]
        lines += _size_table(on_cpu, "kernel", lambda row: f"{row['gbs']:.2f}", "kernel")
    lasso = result.get("lasso")
    if lasso:
        cpu, gpu_side = lasso.get("cpu", {}), lasso.get("gpu")
        lines += ["", f"ADMM lasso {lasso['rows']} x {lasso['cols']}, lam = {lasso['lam_ratio']:g} lambda_max, one "
                  f"process: whole solve at the default tolerances (setup included; median), per iteration of a "
                  f"{lasso['iterations']}-iteration run (fixed rho), x-step alone (a cached-factor solve):", ""]
        columns = ["CPU (numpy)"] + (["GPU (CuPy)", "speedup"] if gpu_side is not None else [])
        lines += ["| | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
        speedups = lasso.get("speedups", {})
        for label, key, scale, unit, speedup in (("whole solve", "solve_s", 1, "s", "solve"),
                                                 ("setup", "setup_s", 1, "s", "setup"),
                                                 ("per iteration", "per_iteration_s", 1e3, "ms", "per_iteration"),
                                                 ("x-step", "x_step_s", 1e6, "us", "x_step"),
                                                 ("iterations", "iterations", None, "", None)):
            def cell(side):
                if side is None or "error" in side:
                    return "failed" if side else "-"
                return str(side[key]) if scale is None else f"{side[key] * scale:.4g} {unit}"
            cells = [cell(cpu)]
            if gpu_side is not None:
                cells += [cell(gpu_side), f"{speedups[speedup]:.2f}x" if speedup in speedups else ""]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    compressors = result.get("compressors", [])
    for backend, label in (("cupy", "on the GPU"), ("numpy", "on the CPU (numpy)")):
        rows = [row for row in compressors if row["backend"] == backend]
        if rows:
            lines += ["", f"Compressors {label}: compress + decompress throughput in GB/s of float32 input "
                      "(and the payload's reduction):", ""]
            lines += _size_table(rows, "compressor", lambda row: f"{row['throughput_gbs']:.2f} "
                                 f"({row['ratio']:.0f}x)", "compressor")
    goals = result.get("targets")
    if goals:
        bandwidth, lasso_goal = goals["bandwidth"], goals["lasso_per_iteration"]
        worst = bandwidth["worst"]
        lines += ["", "Targets (measured, not asserted):",
                  f"- elementwise and packing kernels >= {bandwidth['target']:.0%} of the peak at "
                  f"{human(bandwidth['from_bytes'])} and more: "
                  + (f"worst {worst:.0%}: {_status(bandwidth['met'])}" if worst is not None else "not measured"
                     + (" (pending: no GPU)" if gpu is None else "")),
                  f"- lasso per-iteration GPU speedup >= {lasso_goal['target']:g}x: "
                  + (f"{lasso_goal['value']:.2f}x: {_status(lasso_goal['met'])}" if lasso_goal["value"]
                     else "not measured" + (" (pending: no GPU)" if gpu is None else ""))]
        for name, entry in goals["compression"].items():
            lines.append(f"- {name} compression on GPU >= {entry['target_gbs']:g} GB/s: "
                         + (f"{entry['value_gbs']:.1f} GB/s at {human(entry['bytes'])}: {_status(entry['met'])}"
                            if entry["value_gbs"] is not None
                            else "not measured" + (" (pending: no GPU)" if gpu is None else "")))
    if result.get("errors"):
        lines += ["", f"{len(result['errors'])} part(s) failed:"] + [f"- {error}" for error in result["errors"]]
    return "\n".join(lines)


def _fmt(value, spec=".4g"):
    return "not reached" if value is None else format(value, spec)


def async_sgd_papers_tables(payload):
    """benchmarks/async_sgd_papers.py: one table per configuration."""
    lines = ["The heterogeneous-worker papers' settings (simulator)"]
    for config in payload.get("shadowheart", []) + payload.get("speeds", []):
        lines.append(f"\n{config['part']}: n = {config['n']}, h {config['h']}, tau_i = sqrt(i)/d^{config['beta']}, "
                     f"sigma^2/eps = {config['noise_ratio']:g}")
        base = next(r["measured"] for r in config["rows"] if r["method"] == "shadowheart")
        lines.append("| method | time to eps (theory step) | / Shadowheart | best of grid (step) | predicted |")
        lines.append("|---|---|---|---|---|")
        for r in config["rows"]:
            ratio = None if r["measured"] is None or not base else r["measured"] / base
            grid = f"{_fmt(r.get('grid_best'))} ({_fmt(r.get('grid_step'), 'g')})" if "grid_best" in r else "-"
            lines.append(f"| {r['method']} | {_fmt(r['measured'])} | {_fmt(ratio, '.2f')} | {grid} | "
                         f"{_fmt(r['predicted'])} |")
    for block in payload.get("mindflayer", []):
        lines.append(f"\nmindflayer: {block['tau']} {block['options']}, n = {block['n']}, {block['seeds']} seeds")
        lines.append("| method | time to eps | predicted |")
        lines.append("|---|---|---|")
        lines += [f"| {r['method']} | {_fmt(r['measured'])} | {_fmt(r['predicted'])} |" for r in block["rows"]]
    for block in payload.get("outages", []):
        lines.append(f"\noutages: off {block['fraction']:g} of every 50 units, n = {block['n']}")
        lines.append("| method | problem | time to eps | predicted (universal model) |")
        lines.append("|---|---|---|---|")
        lines += [f"| {r['method']} | {r['problem']} | {_fmt(r['measured'])} | {_fmt(r['predicted'])} |"
                  for r in block["rows"]]
    for block in payload.get("freya", []):
        lines.append(f"\nfreya: {block['problem']} (m = {block['samples']}), n = {block['n']}, h_i = sqrt(i), "
                     f"{block['seeds']} seeds")
        base = block["rows"][0]["measured"]
        lines.append("| method | time to eps (theory) | / Freya PAGE | best of grid (step) | predicted |")
        lines.append("|---|---|---|---|---|")
        for r in block["rows"]:
            ratio = None if r["measured"] is None or not base else r["measured"] / base
            lines.append(f"| {r['method']} | {_fmt(r['measured'])} | {_fmt(ratio, '.2f')} | "
                         f"{_fmt(r['grid_best'])} ({_fmt(r['grid_step'], 'g')}) | {_fmt(r['predicted'])} |")
    for block in payload.get("fragile", []):
        lines.append(f"\nfragile: mesh of n = {block['n']}, rho = {block['rho']:g}, h_i = 1, d = {block['dim']}, "
                     f"{block['seeds']} seeds")
        lines.append("| S | time to eps (gamma = 1/2L) | best of grid (gamma) | predicted | pivot | workers contributing |")
        lines.append("|---|---|---|---|---|---|")
        lines += [f"| {r['S']} | {_fmt(r['measured'])} | {_fmt(r['grid_best'])} ({_fmt(r['grid_step'], 'g')}) | "
                  f"{_fmt(r['predicted'])} | {r['pivot']} | {r['contributing']} |" for r in block["rows"]]
    return "\n".join(lines)


def compression_pay_tables(result):
    """The compressors' measured compute (numpy twins and compiled kernels, beside np.copyto), the predicted
    all-reduce at 1, 10, 100 Gb/s against the dense ring, where each pays, and the training step check."""
    kernels, nbytes = result["kernels"], result["bytes"]
    copy = [row for row in kernels if row["compressor"] == "copyto"]
    lines = [f"Compressors on {human(nbytes)} of float32, one thread, median of {result['repeat']} (measured); "
             f"np.copyto: {nbytes / copy[0]['copy_s'] / 1e9:.2f} GB/s. Throughput = bytes / (compress + decompress); "
             "compress includes error feedback where the compressed reducer adds it:", "",
             "| compressor | kernels | compress (ms) | decompress (ms) | accumulate (ms) | payload sum (ms) | GB/s | "
             "of copyto |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in kernels:
        if row["compressor"] == "copyto":
            continue
        lines.append(f"| {row['compressor']} | {row['path']} | {row['compress_s'] * 1e3:.2f} | "
                     f"{row['decompress_s'] * 1e3:.2f} | {_milliseconds(row.get('accumulate_s'))} | "
                     f"{_milliseconds(row.get('payload_sum_s'))} | {row['throughput_gbs']:.2f} | "
                     f"{row['of_copyto']:.0%} |")
    predictions, ranks = result["predictions"], result["ranks"]
    lines += ["", f"One all-reduce of {human(nbytes)} of float32, predicted: the alpha-beta model on a link of the "
              f"bandwidth shown, latency {result['alpha_s'] * 1e6:g} us, plus each compressor's measured compute "
              "(above); the dense ring's reduction at this machine's float32 add. ms; * where it beats the dense "
              "ring:", ""]
    for gbps in result["networks_gbps"]:
        lines += [f"{gbps} Gb/s:", "", "| compressor | kernels | " + " | ".join(f"p = {p}" for p in ranks) + " |",
                  "|---|---|" + "---:|" * len(ranks)]
        keys = list(dict.fromkeys((row["compressor"], row["path"]) for row in predictions if row["gbps"] == gbps))
        for compressor, path in keys:
            cells = [row for row in predictions if row["gbps"] == gbps and (row["compressor"], row["path"]) ==
                     (compressor, path)]
            lines.append(f"| {compressor} | {path} | " + " | ".join(
                f"{row['total_s'] * 1e3:.1f}{' *' if row['pays'] else ''}" for row in cells) + " |")
        lines.append("")
    lines += ["Where each compressor beats the dense ring (link: ranks):", "",
              "| compressor | kernels | " + " | ".join(f"{g} Gb/s" for g in result["networks_gbps"]) + " |",
              "|---|---|" + "---|" * len(result["networks_gbps"])]
    keys = list(dict.fromkeys((row["compressor"], row["path"]) for row in predictions if row["pays"] is not None))
    for compressor, path in keys:
        cells = []
        for gbps in result["networks_gbps"]:
            winning = [row["ranks"] for row in predictions if row["gbps"] == gbps and row["pays"]
                       and (row["compressor"], row["path"]) == (compressor, path)]
            cells.append(", ".join(map(str, winning)) if winning else "never")
        lines.append(f"| {compressor} | {path} | " + " | ".join(cells) + " |")
    training = result.get("training")
    if training:
        lines += ["", f"Training {training['model']}, {training['ranks']} ranks, batch {training['batch_size']} "
                  f"(measured; median step of {result['repeat']} runs): the step with a compressor against the "
                  "uncompressed step plus the compressor's measured time for the gradient:", "",
                  "| compressor | kernels | step (ms) | compressor (ms) | bound (ms) | within |",
                  "|---|---|---:|---:|---:|---|"]
        for row in training["rows"]:
            lines.append(f"| {row['compressor']} | {row['path']} | {row['step_s'] * 1e3:.2f} | "
                         f"{row['codec_s'] * 1e3:.2f} | {row['bound_s'] * 1e3:.2f} | {_yes(row['within'])} |")
    return "\n".join(lines)


def _milliseconds(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


RENDERERS = {"allreduce": allreduce_tables, "admm_lasso": lasso_tables, "admm_general-logistic": logistic_tables,
             "admm_general-path": path_tables, "admm_general-rho": rho_tables, "compression": compression_tables,
             "train": train_tables, "federated": federated_tables,
             "async_sgd": async_sgd_tables, "async_sgd_papers": async_sgd_papers_tables,
             "kernels": kernels_tables, "compression_pay": compression_pay_tables}


COMPETITOR_MODULES = {"scikit-learn": "sklearn", "celer": "celer", "skglm": "skglm"}  # package: module


def _cell(value, form):
    return "-" if value is None else format(value, form)


def sparse_solver_tables(payload):
    """The designs suite (benchmarks/sparse_solvers.py): a summary, one line per design and weight, then the
    detail, one line per design, weight and solver."""
    family = payload["family"]
    title = {"lasso": "Lasso", "logistic": "L1 logistic regression",
             "path": f"Lasso path ({payload.get('n_lams')} weights, lambda_max to "
                     f"{payload.get('lam_min_ratio')} lambda_max, warm-started)"}[family]
    yardstick = {"lasso": "the fastest of skglm, celer and scikit-learn",
                 "logistic": "the fastest of skglm, celer and scikit-learn",
                 "path": "skglm's path (sparse designs), scikit-learn lasso_path (dense)"}[family]
    lines = [f"{title}: time to a relative objective gap of {payload['target']:g}, {payload['ranks']} ranks (ADMM), "
             f"competitors on rank 0 with {payload['cores']} cores; median of {payload['repeat']}; "
             f"target: ADMM at most {yardstick}", ""] + _sparse_summary(payload) + [
             "", "| design | lam / lambda_max | solver | time to target (s) | rel. objective gap reached | iterations | "
             "mpiopt rel. duality gap | ratio to fastest competitor | target met? |",
             "|---|---:|---|---:|---:|---:|---:|---:|:---:|"]
    for entry in payload["designs"]:
        lam = _lam_cell(entry)
        for row in entry["rows_of_table"]:
            if "seconds" not in row:
                lines.append(f"| {entry['design']} | {lam} | {row['solver']} | {row['status']} | | | | | |")
                continue
            time_cell = f"{row['seconds']:.4g}" + ("" if row["status"] == "reached" else " (not reached)")
            iterations = _cell(row["iterations"], "d")
            if row.get("outer_iterations") is not None:
                iterations += f" ({row['outer_iterations']} outer)"
            met = row.get("target_met", "")
            met = "" if row["package"] != "mpiopt" else {True: "yes", False: "no", None: "-"}[met]
            lines.append(f"| {entry['design']} | {lam} | {row['solver']} (tol {row['tolerance']:.0e}) | {time_cell} | "
                         f"{row['relative_gap']:.1e} | {iterations} | {_cell(row.get('mpiopt_relative_gap'), '.1e')} | "
                         f"{_cell(row.get('ratio_to_fastest_competitor'), '.2f')} | {met} |")
    described = {}
    for entry in payload["designs"]:
        described.setdefault(entry["design"], entry["description"])
    lines += ["", "Designs: " + "; ".join(f"{name}: {text}" for name, text in described.items()),
              "Installed: " + ", ".join(f"{k} {payload['versions'].get(COMPETITOR_MODULES[k]) if v else 'no'}"
                                        for k, v in payload["installed"].items())]
    return "\n".join(lines)


def _lam_cell(entry):
    return "path" if entry.get("lam_ratio") is None else f"{entry['lam_ratio']:g}"


def _sparse_summary(payload):
    """One line per design and weight: each competitor's time, each mpiopt variant's time, ratio and gap."""
    variants = list(payload["variants"])
    lines = ["| design | lam / lambda_max | " + " | ".join(f"{name} (s)" for name in COMPETITOR_MODULES) + " | " +
             " | ".join(f"mpiopt {name}: s (ratio, duality gap)" for name in variants) + " | target met? |",
             "|---|---:|" + "---:|" * (len(COMPETITOR_MODULES) + len(variants)) + ":---:|"]
    for entry in payload["designs"]:
        rows = entry["rows_of_table"]
        cells = [_summary_cell(next((row for row in rows if row["package"] == name), None), False)
                 for name in COMPETITOR_MODULES]
        admm = [row for row in rows if row["package"] == "mpiopt"]
        cells += [_summary_cell(row, True) for row in admm]
        met = admm[0].get("target_met") if admm else None
        lines.append(f"| {entry['design']} | {_lam_cell(entry)} | " + " | ".join(cells) +
                     f" | {({True: 'yes', False: 'no'}).get(met, '-')} |")
    lines.append(f"(* not reached: the run closest to {payload['target']:g}; the target met? column: mpiopt "
                 f"{variants[0] if variants else '-'})")
    return lines


def _summary_cell(row, admm):
    if row is None:
        return "-"
    if "seconds" not in row:
        return row["status"]
    cell = f"{row['seconds']:.3g}" + ("" if row["status"] == "reached" else "*")
    if admm:
        cell += (f" ({_cell(row.get('ratio_to_fastest_competitor'), '.2f')}x, "
                 f"{_cell(row.get('mpiopt_relative_gap'), '.0e')})")
    return cell


for _name in ("admm_lasso-designs", "admm_general-logistic-designs", "admm_general-path-designs"):
    RENDERERS[_name] = sparse_solver_tables


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
