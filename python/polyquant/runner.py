"""``polyquant.runner``, the library behind ``polyquant run`` (documented for use on its own), now
lives in ``polyquant._tools.runner``; this name stays as an alias of that same module object, so
``from polyquant import runner`` and patches of its attributes keep working."""

import sys

from ._tools import runner as _runner

sys.modules[__name__] = _runner
