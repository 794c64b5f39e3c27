"""Every default of the prompt processor, in one place.

``[processors.prompt]`` in the settings sets any of them, e.g.::

    [processors.prompt]
    class = "ragbus.prompt:PromptProcessor"
    backend = "openai"

    [processors.prompt.openai]
    base_url = "http://127.0.0.1:11434/v1"
    model = "llama3.2:1b"

and environment variables override them: ``RAGBUS_PROCESSORS__PROMPT__BACKEND=openai``,
``RAGBUS_PROCESSORS__PROMPT__EXTRACTIVE__MAX_SENTENCES=3``,
``RAGBUS_PROCESSORS__PROMPT__OPENAI__API_KEY=...``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ragbus.config.bounds import NonNegativeInt, PositiveInt
from ragbus.config.settings import ProcessorSettings, RetrySettings


class ExtractiveSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The default backend: no model; answers are sentences picked from the given documents and facts."""

    # Document sentences in one answer, the most relevant first.
    max_sentences: PositiveInt = 5
    # Facts in one answer (after the document sentences), the most relevant first. 0 = never cite facts.
    max_facts: NonNegativeInt = 5
    # A longer sentence is cut at a word boundary and ends with "…" (a chunk without punctuation
    # would otherwise come back whole).
    max_sentence_chars: Annotated[int, msgspec.Meta(ge=20)] = 400
    # BM25 over sentences: term-frequency saturation and length normalisation, as in Lucene.
    k1: Annotated[float, msgspec.Meta(ge=0)] = 1.2
    b: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.75
    # A sentence is relevant when its score is above this; 0 = sharing one non-stopword with the
    # question is enough.
    min_score: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    # Retrieval already ranked the documents: a sentence of the n-th document (from 0) has its
    # score multiplied by 1 + rank_weight / (1 + n), so the best chunk's best sentence leads.
    # 0 = sentences compete on their own words only.
    rank_weight: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    # Words are compared by their English stems ("casefolding" meets "casefold", "globals" "global");
    # false = as written (case aside).
    stems: bool = True
    # A sentence a signature heads (``object.__getattr__(self, name) — Called when ...``) leads the
    # answer when the question names what the signature defines: it is the reference's entry for it;
    # so does a sentence that defines what a question asks to have defined ("What is a future
    # statement?" and "A future statement is a directive to the compiler ...").
    definitions_first: bool = True
    # An entry (the sentences a signature or a label heads: ``d[key] — Return the item of d with key
    # key. Raises a "KeyError" if key is not in the map.``) is said as one line up to the next heading,
    # while it fits in max_sentence_chars: its first sentence alone often says only half of it.
    entries: bool = True
    # A sentence that starts with "It", "This", "These", "They", "Its", "Their" or "Such" is said with
    # the sentence before it, as one line, while the two fit in max_sentence_chars.
    refer_back: bool = True
    # Each sentence is picked balancing relevance against what the answer already says (maximal
    # marginal relevance): its score as a share of the best one's, less diversity times its word
    # overlap (Jaccard) with the closest sentence already picked. 0 = by relevance alone.
    diversity: Annotated[float, msgspec.Meta(ge=0)] = 0.5
    # A sentence picked is said only when it answers (``answering.py``): not a cross-reference ("See PEP
    # 570 for details."); when the question names code, a keyword or an operator (``__index__``, "the
    # with statement", ``@``), one that says the name, unless it shares with the question words besides
    # the name's own parts ("index") and the question says more than name_words words besides it. So an
    # answer stops when its evidence does, at fewer than max_sentences lines, and says that nothing was
    # found when no line answers. false = always say the best max_sentences.
    answering: bool = True
    # The words besides an asked name up to which a question asks about the name alone ("What does
    # __contains__ implement?", "What is the value of __debug__?", "What is the @ operator for?"): a
    # sentence that does not say the name is left out. Chosen on the dev half of scripts/eval
    # (``python -m scripts.eval_answers --replay``, lines labelled by hand in
    # scripts/eval/answer_lines_dev.jsonl): 0 / 1 / 2 / 3 leave 188 / 168 / 165 / 159 of the 222
    # unrelated lines of 96 answers (28 / 38 / 39 / 42% of the answers with none), and 3 loses the
    # evidence of two questions of several concepts ("How does the del statement relate to the __del__
    # method?"), the answer step's recall 0.919 -> 0.892: 1 is a step short of where the evidence goes,
    # 2 leaving out three lines more, one of them an answering one.
    name_words: NonNegativeInt = 1


class OpenAISettings(RetrySettings, kw_only=True, forbid_unknown_fields=True):
    """Any OpenAI-compatible chat endpoint: POST {base_url}/chat/completions (Ollama, vLLM, llama.cpp).

    The retry fields (max_retries, backoff_base_s, backoff_max_s, max_retry_after_s) come from
    ``RetrySettings`` in config/settings.py, shared with the embed backend.
    """

    # Up to and including the version, as OpenAI's own clients take it.
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    # Sent as "Authorization: Bearer ..."; "" = no Authorization header (most local servers).
    api_key: str = ""
    # One HTTP attempt; the whole request is also bounded by handler_timeout_s and its deadline.
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    # Sampling: 0 = the most likely answer, so the same prompt tends to give the same text.
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.0
    # Most tokens of one completion.
    max_tokens: PositiveInt = 512
    # What the model reads of a template's documents and facts: "sentences" = the whole sentences
    # most relevant to the question, each once, citing every document it is in, and only the facts
    # that match the question, chosen as the extractive answer chooses (its settings,
    # [processors.prompt.extractive], apply); "chunks" = every chunk and fact as they were sent.
    context: Literal["sentences", "chunks"] = "sentences"
    # Sentences the model reads with context = "sentences". On the dev half of scripts/eval, 16 keep
    # the evidence of 68 of the 74 questions whose evidence retrieval found (all 74 are in the whole
    # chunks) in 38% of the chunks' text (1,673 characters a prompt, not 4,391); 5 keep 64, 12 keep 67
    # (chosen by relevance alone; with the extractive diversity of 0.5, 67, 65 and 67).
    context_sentences: PositiveInt = 16


class PromptSettings(ProcessorSettings, kw_only=True, forbid_unknown_fields=True):
    backend: Literal["extractive", "openai"] = "extractive"
    # Where the templates are: one <template-id>.txt each. "" = config/templates/ of this package.
    templates_dir: str = ""
    # Placeholder names templates of your own may use besides the built-in ones (query, documents,
    # document_ids, facts, at_time, snapshot_header); any other placeholder fails at load time.
    template_variables: list[str] = msgspec.field(default_factory=list)
    # extract-concepts: concepts after the question itself (the first line). 0 = the question only.
    # 0 by default because it measures better: on the 190 questions of scripts/eval, embedding the
    # question alone beat the question plus the extractive concepts in every question kind (vector
    # nDCG@10 0.546 vs 0.449, hybrid 0.605 vs 0.565; python scripts/eval_retrieval.py). Each
    # concept's ranking gets a full vote in the fusion, and word-run concepts are generic words.
    # With the openai backend, measure before raising it.
    max_concepts: NonNegativeInt = 0
    extractive: ExtractiveSettings = msgspec.field(default_factory=ExtractiveSettings)
    openai: OpenAISettings = msgspec.field(default_factory=OpenAISettings)
