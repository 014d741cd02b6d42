"""streamfold.specs: the executable specification of a Responses API event stream.

`check(events)` judges any server's stream against the numbered rules of `specs/README.md`.
"""

from ._checker import check
from ._violation import RULES, Violation, format_report

__all__ = ["RULES", "Violation", "check", "format_report"]
