"""The prompt processor: ``PromptRequest(template_id, variables)`` -> ``PromptResult``.

Templates are plain text files in ``config/templates/`` (``templates.py``),
filled by plain substitution; which variables each needs: ``variables.py``.
Backends: ``extractive`` (default; no model, deterministic: concepts by
word runs, answers as cited sentences picked by BM25; ``extractive/``, its pipeline in
docs/extractive-answer.md) and ``openai`` (any
OpenAI-compatible chat-completions endpoint). ``PromptResult.backend`` says
which one answered. Settings and their defaults: ``settings.py``.
"""

from .processor import PromptProcessor
from .settings import ExtractiveSettings, OpenAISettings, PromptSettings

__all__ = ["ExtractiveSettings", "OpenAISettings", "PromptProcessor", "PromptSettings"]
