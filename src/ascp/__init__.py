"""ascp: evidence-aware multi-round (portfolio) retrieval-augmented generation.

The public API is deliberately small; heavy modules (torch, transformers) load only when used.
"""

from ascp.errors import AscpError
from ascp.types import AttributionRequest, AttributionResult, Passage

__all__ = ["AscpError", "AttributionRequest", "AttributionResult", "Passage", "__version__"]
__version__ = "0.1.0"
