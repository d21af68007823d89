"""The self-contained HTML burn-in report: render(analysis, run_dir) -> run_dir/report.html."""

from .render import render

__all__ = ["render"]
