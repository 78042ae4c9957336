"""Iteration log on rank 0, in the style of OSQP and SCS."""
import sys

RULE = "-" * 86
HEADER = (f"{'iter':>6} {'objective':>14} {'r_norm':>10} {'eps_pri':>10} "
          f"{'s_norm':>10} {'eps_dual':>10} {'rho':>10} {'time(s)':>9}")


class IterationLog:
    """Prints the banner, one row per logged iteration and a footer, on rank 0 only."""

    def __init__(self, enabled, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.header_printed = False

    def _print(self, text):
        if self.enabled:
            print(text, file=self.stream, flush=True)

    def banner(self, title, lines):
        self._print(RULE)
        self._print(f"{title:^86}")
        self._print(RULE)
        for line in lines:
            self._print(line)
        self._print(RULE)

    def note(self, text):
        """A line in place of iteration rows (a resumed run with nothing left to do)."""
        self._print(text)

    def row(self, iteration, objective, r_norm, eps_pri, s_norm, eps_dual, rho, elapsed):
        if not self.header_printed:  # the column header comes with the first row, so a run without rows has none
            self._print(HEADER)
            self.header_printed = True
        self._print(f"{iteration:6d} {objective:14.8e} {r_norm:10.3e} {eps_pri:10.3e} "
                    f"{s_norm:10.3e} {eps_dual:10.3e} {rho:10.3e} {elapsed:9.3f}")

    def footer(self, result):
        t = result.timings
        self._print(RULE)
        self._print(f"status:      {result.status}")
        self._print(f"iterations:  {result.iterations}")
        self._print(f"objective:   {result.objective:.12e}")
        info = result.info
        self._print(f"nonzeros:    {info['nonzeros']} of {info['n']}")
        self._print(f"optimality:  KKT residual ||x - prox_g(x - grad f(x))||_inf = {info['kkt_residual']:.3e}")
        self._print(f"setup time:  {t['setup']:.3f} s")
        ran = info["iterations_run"]
        if ran:
            self._print(f"solve time:  {t['solve']:.3f} s ({1e3 * t['per_iteration']:.3f} ms/iteration: "
                        f"x-step {1e3 * t['x_step'] / ran:.3f} ms, communication {1e3 * t['communication'] / ran:.3f} ms)")
        else:
            self._print(f"solve time:  none (resumed at iteration {result.iterations}, nothing left to do)")
        self._print(RULE)
