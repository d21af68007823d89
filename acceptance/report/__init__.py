"""The self-contained HTML burn-in report: render(analysis, run_dir) -> run_dir/report.html.

render (acceptance.report.page) is imported on first use: matplotlib and jinja2 take seconds to import
on a slow node, and the terminal summary needs only acceptance.report.digest."""

__all__ = ["render"]


def __getattr__(name):
    if name == "render":
        from .page import render
        return render
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
