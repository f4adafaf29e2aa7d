"""Old path of `specguard_integrations.llama_index.trace_handler`, kept for one release.

`from specguard_integrations.llama_index_trace import SpecGuardTraceHandler` still works, with a
`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import warnings

from specguard_integrations.llama_index.trace_handler import SpecGuardTraceHandler

__all__ = ["SpecGuardTraceHandler"]

warnings.warn("specguard_integrations.llama_index_trace moved to "
              "specguard_integrations.llama_index.trace_handler; the old path goes in the next "
              "release", DeprecationWarning, stacklevel=2)
