"""Files to text on the bus (document-convert): parts of a file in, its pages streamed back.

OCR takes about a second a page, so conversion is a step that scales with its workers, like embedding.
``processor.py`` serves the topic, ``uploads.py`` keeps the parts of each file, ``pages.py`` reads a
file a page at a time and cuts a page into pieces that fit a message, ``settings.py`` has the defaults.
"""

from .processor import DocumentConvertProcessor
from .settings import DocumentConvertSettings

__all__ = ["DocumentConvertProcessor", "DocumentConvertSettings"]
