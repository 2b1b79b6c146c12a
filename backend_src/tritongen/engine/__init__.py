"""The in-process engine: requests in, tokens out, with no server around it.

`Engine` and the option and result types are the public API; the rest of the
package is the step loop's parts (scheduler, model runner, output processor).
"""

from .engine import Engine, EngineOverloaded, EngineStopped, RequestHandle
from .options import (
                      EngineConfig,
                      FinishReason,
                      GenerateOptions,
                      GenerateRequest,
                      GenerateResult,
                      GenerateToken,
                      Priority,
                      SchedulerConfig,
)
from .snapshot import EngineSnapshot

__all__ = ["Engine", "EngineConfig", "EngineOverloaded", "EngineSnapshot", "EngineStopped", "FinishReason",
           "GenerateOptions", "GenerateRequest", "GenerateResult", "GenerateToken", "Priority", "RequestHandle",
           "SchedulerConfig"]
