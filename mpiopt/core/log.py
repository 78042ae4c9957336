"""An iteration log printed once, by one rank, in the style of OSQP and SCS.

The caller gives the columns (a name and a format for each) and the lines of
the banner and the footer; the log prints a rule, the title and the banner,
the column header with the first row, one line per logged iteration, and the
footer.  Only the rank that owns the log prints (``enabled``), so a message is
printed once, not once per rank.
"""
import sys


class IterationLog:
    def __init__(self, enabled, columns, width=86, stream=None):
        """``columns``: (name, format spec) pairs, e.g. ("iter", "6d"), ("objective", "14.8e")."""
        self.enabled, self.columns, self.width = enabled, list(columns), width
        self.stream = stream or sys.stdout
        self.rule = "-" * width
        self.header_printed = False

    def _print(self, text):
        if self.enabled:
            print(text, file=self.stream, flush=True)

    def header(self):
        """The column names, right-aligned over their values."""
        return " ".join(f"{name:>{_width(spec)}}" for name, spec in self.columns)

    def banner(self, title, lines):
        self._print(self.rule)
        self._print(f"{title:^{self.width}}")
        self._print(self.rule)
        for line in lines:
            self._print(line)
        self._print(self.rule)

    def note(self, text):
        """A line among the rows (a resumed run with nothing left to do, a restart, ...)."""
        self._print(text)

    def row(self, *values):
        if not self.enabled:
            return
        if not self.header_printed:  # the header comes with the first row: a run without rows has none
            self._print(self.header())
            self.header_printed = True
        self._print(" ".join(f"{value:{spec}}" for value, (_, spec) in zip(values, self.columns)))

    def footer(self, lines):
        self._print(self.rule)
        for line in lines:
            self._print(line)
        self._print(self.rule)


def _width(spec):
    """The field width of a format spec such as '14.8e' or '6d'."""
    digits = ""
    for character in spec:
        if not character.isdigit():
            break
        digits += character
    return int(digits) if digits else 0
