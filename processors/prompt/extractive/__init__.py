"""The extractive backend: answers, concepts and standalone questions from the given text alone, no model.

``backend.py`` is the backend; ``answer.py`` picks and cites the sentences of an answer
(docs/extractive-answer.md follows a request through every module here).
"""
