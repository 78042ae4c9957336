"""ADMM's iteration log on rank 0, in the style of OSQP and SCS, on the core's IterationLog.

The solver builds the banner from the problem and the settings
(:func:`banner_lines`), the engine adds a row per logged iteration, and the
solver prints the footer from the result (:func:`footer_lines`).
"""
from ..core.log import IterationLog

COLUMNS = (("iter", "6d"), ("objective", "14.8e"), ("r_norm", "10.3e"), ("eps_pri", "10.3e"), ("s_norm", "10.3e"),
           ("eps_dual", "10.3e"), ("rho", "10.3e"), ("time(s)", "9.3f"))


def admm_log(enabled, stream=None, gap=False):
    """The log's columns, with a duality-gap column when the gap is available (``gap``)."""
    return IterationLog(enabled, COLUMNS + ((("gap", "10.3e"),) if gap else ()), stream=stream)


def banner_lines(info, settings, penalty, lam_ratio, kinds, x_step, threads, rho_source, setup_time,
                 checkpoint=None):
    """The lines between the title and the table: the problem, the shards, the threads, the settings."""
    lam_text = "" if info["lam"] is None else f", lam = {info['lam']:.4e}" + (
        f" ({lam_ratio:g} x lambda_max = {info['lambda_max']:.4e})" if lam_ratio is not None else "")
    return [
        f"problem:  {info['loss']} loss + {penalty.describe()}",
        f"          rows m = {info['rows']}, variables n = {info['n']}"
        + (" (with intercept)" if info["intercept"] else "") + f", ranks = {info['ranks']} "
        f"({info['active_ranks']} with rows){lam_text}",
        f"shards:   tall {kinds.count('tall')}, wide {kinds.count('wide')}, empty {kinds.count('empty')}; "
        f"x-step: {x_step}",
        f"threads:  {threads.describe()}",
        f"settings: rho = {info['rho_initial']:.3e} ({rho_source}), adaptive rho {settings.adaptive_rho}, "
        f"alpha = {settings.alpha:.2f}, eps_abs = {settings.eps_abs:.1e}, eps_rel = {settings.eps_rel:.1e},",
        f"          max_iter = {settings.max_iter}, reducer = {info['reducer']}"
        + (f", gap_tol = {settings.gap_tol:.1e} (every {settings.gap_every})" if settings.gap_tol is not None else ""),
        f"setup:    {setup_time:.3f} s" + (f"; resumed from {checkpoint} at iteration {info['resumed_at']}"
                                           if checkpoint else ""),
    ]


def footer_lines(result):
    t, info = result.timings, result.info
    lines = [f"status:      {result.status}",
             f"iterations:  {result.iterations}",
             f"objective:   {result.objective:.12e}",
             f"nonzeros:    {info['nonzeros']} of {info['n']}",
             f"optimality:  KKT residual ||x - prox_g(x - grad f(x))||_inf = {info['kkt_residual']:.3e}"]
    if info.get("gap") is not None:
        lines.append(f"certificate: duality gap {info['gap']:.3e} (relative {info['relative_gap']:.3e}), "
                     f"dual objective {info['dual_objective']:.12e}")
    lines.append(f"setup time:  {t['setup']:.3f} s")
    ran = info["iterations_run"]
    if ran:
        lines.append(f"solve time:  {t['solve']:.3f} s ({1e3 * t['per_iteration']:.3f} ms/iteration: "
                     f"x-step {1e3 * t['x_step'] / ran:.3f} ms, communication {1e3 * t['communication'] / ran:.3f} ms)")
    else:
        lines.append(f"solve time:  none (resumed at iteration {result.iterations}, nothing left to do)")
    return lines


# -- the working sets' log (workingset.py): a row per outer iteration ---------------------------------------
WORKING_SET_COLUMNS = (("outer", "5d"), ("|W|", "6d"), ("screened", "8d"), ("iter", "7d"), ("objective", "14.8e"),
                       ("gap", "10.3e"), ("rel_gap", "10.3e"), ("time(s)", "9.3f"))


def working_set_log(enabled, stream=None):
    """The working sets' log: a row per certificate (outer iteration)."""
    return IterationLog(enabled, WORKING_SET_COLUMNS, stream=stream)


def inner_word(inner):
    """What the inner iterations are called: "Newton" (proximal Newton) or "ADMM"."""
    return "Newton" if inner == "prox_newton" else "ADMM"


def working_set_banner_lines(problem, settings, penalty, largest, threads, inner, fraction, tol, setup_time):
    """The lines between the title and the table: the problem, the threads, the working sets, the stop."""
    return [
        f"problem:  {problem.loss} loss + {penalty.describe()}",
        f"          rows m = {problem.total_rows}, variables n = {problem.shard.n}"
        + (" (with intercept)" if problem.intercept else "") + f", ranks = {problem.comm.size}"
        + (f", lambda_max = {largest:.4e}" if largest else ""),
        f"threads:  {threads.describe()}",
        f"working sets: first size {settings.working_set_size}, then max(that, 2 x support); inner "
        f"{'proximal Newton' if inner == 'prox_newton' else 'ADMM'} to {fraction} x the gap; "
        f"gap-safe screening at each check",
        f"stopping: relative duality gap <= {tol:.1e} on all {problem.shard.design.features} columns, "
        f"max_iter = {settings.max_iter} {inner_word(inner)} iterations",
        f"setup:    {setup_time:.3f} s"]


def working_set_footer_lines(result, n, inner, setup_time, resumed_at=None):
    """The footer from the working sets' ADMMResult; ``resumed_at``: the iteration a resumed run started at."""
    info, t, word = result.info, result.timings, inner_word(inner)
    return [f"status:      {result.status} after {info['outer_iterations']} outer and {result.iterations} {word} "
            f"iterations",
            f"objective:   {result.objective:.12e}",
            f"optimality:  KKT residual ||x - prox_g(x - grad f(x))||_inf = {info['kkt_residual']:.3e}",
            f"certificate: duality gap {result.gap:.3e} (relative {result.relative_gap:.3e}), "
            f"dual objective {info['dual_objective']:.12e}",
            f"nonzeros:    {info['nonzeros']} of {n}; screened {info['screened']}",
            f"time:        {t['total']:.3f} s (setup {setup_time:.3f}, gather {t['gather']:.3f}, "
            f"{word} {t['solve']:.3f}, gaps {t['gap']:.3f})"
            + (f"; this run's, resumed at iteration {resumed_at}" if resumed_at is not None else "")]
