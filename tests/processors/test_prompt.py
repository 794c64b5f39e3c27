"""The prompt processor with its default, extractive backend: templates, concepts, cited answers.

Unit tests of each part first, then the processor over a private memory bus
through ``PromptClient``, as a caller sees it.
"""

from __future__ import annotations

import time
import uuid

import pytest
import pytest_asyncio

from ragbus.config.settings import SettingsError, load_settings
from ragbus.ingestion.markup import plain
from ragbus.prompt import ExtractiveSettings, PromptProcessor, PromptSettings
from ragbus.prompt import templates as tpl
from ragbus.prompt.extractive.answer import compose
from ragbus.prompt.extractive.asked import asked_subject, defined_subject
from ragbus.prompt.extractive.concepts import extract
from ragbus.prompt.extractive.lexical import bm25, sentences, stems, terms
from ragbus.prompt.processor import load_templates
from ragbus.prompt.templates import TemplateError, parse
from ragbus.prompt.variables import VariablesError, check
from ragbus.runtime.typed_clients import RemoteError
from ragbus.runtime.worker import build_processor

from ..helpers.serving import serve_prompt as serve

# The async tests share the module's event loop, which the module-scoped processor runs on.
module_loop = pytest.mark.asyncio(loop_scope="module")

MERKEL_DOCS = [
    "Angela Merkel was Chancellor of Germany from 2005 to 2021. She studied physics in Leipzig.",
    "The Bundestag elects the head of government of Germany. Berlin is the capital of Germany.",
    "Bananas are rich in potassium.",
]
MERKEL_IDS = ["bio#0", "politics#4", "food#1"]
FACTS = ["Angela Merkel head_of_government_of Germany", "Olaf Scholz member_of SPD", "Banana color yellow"]
HEADER = "Graph context valid as of 2010-06-01 (KnowledgeGraph snapshot)"


def builtin(template_id: str) -> tpl.Template:
    return load_templates(PromptSettings())[template_id]


def answer(variables: dict, **settings) -> str:
    return compose(check(builtin("document-prompt"), variables), ExtractiveSettings(**settings))


# Templates: plain substitution, checked when loaded.


def test_substitution_never_expands_a_value():
    t = parse("t", "Q: {query}\nD: {documents} {{literal}}")
    value = "what is {query}? {documents} {0.__class__} {{x}}"
    assert t.render({"query": value, "documents": "{query}"}) == f"Q: {value}\nD: {{query}} {{literal}}"
    assert t.placeholders == {"query", "documents"}


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("Q: {qeury}", "unknown placeholder '{qeury}'"),
        ("JSON: {\"a\": 1}", "is not a placeholder"),
        ("a lone { brace", "a lone '{'"),
        ("a lone } brace", "a lone '}'"),
        ("{1st}", "is not a placeholder"),
        ("{ query }", "is not a placeholder"),
    ],
)
def test_a_malformed_or_unknown_placeholder_is_a_load_time_error(text, complaint):
    with pytest.raises(TemplateError) as caught:
        parse("mine", "line one\n" + text, {"query", "documents"})
    assert complaint in str(caught.value) and "template 'mine', line 2" in str(caught.value)


def test_the_packaged_templates_load_and_a_broken_directory_does_not(tmp_path):
    loaded = load_templates(PromptSettings())
    assert {"extract-concepts", "document-prompt"} <= set(loaded)
    assert loaded["extract-concepts"].placeholders == {"query"}
    assert {"query", "documents", "facts"} <= loaded["document-prompt"].placeholders

    # extract-concepts gets only the query: a template asking for more would fail every request
    (tmp_path / "extract-concepts.txt").write_text("{query} {documents}")
    with pytest.raises(TemplateError, match=r"unknown placeholder '\{documents\}'"):
        load_templates(PromptSettings(templates_dir=str(tmp_path)))
    (tmp_path / "extract-concepts.txt").write_text("{query}")
    (tmp_path / "summary.txt").write_text("Summarise {text} for {audience}")
    with pytest.raises(TemplateError, match=r"unknown placeholder '\{text\}'"):
        load_templates(PromptSettings(templates_dir=str(tmp_path)))
    # unless the settings declare the names of one's own templates
    mine = load_templates(PromptSettings(templates_dir=str(tmp_path), template_variables=["text", "audience"]))
    assert set(mine) == {"extract-concepts", "summary"}
    with pytest.raises(TemplateError, match="does not exist"):
        load_templates(PromptSettings(templates_dir=str(tmp_path / "nowhere")))


def test_missing_and_mistyped_variables_are_named():
    doc = builtin("document-prompt")
    with pytest.raises(VariablesError, match=r"needs variable\(s\) documents; the request sent: query"):
        check(doc, {"query": "q"})
    with pytest.raises(VariablesError, match="'query' must be a text"):
        check(doc, {"query": ["q"], "documents": []})
    with pytest.raises(VariablesError, match="'facts' must be a list"):
        check(doc, {"query": "q", "documents": [], "facts": "one fact"})
    with pytest.raises(VariablesError, match="2 document_ids for 1 documents"):
        check(doc, {"query": "q", "documents": ["d"], "document_ids": ["a", "b"]})
    with pytest.raises(VariablesError, match="'query' is blank"):
        check(builtin("extract-concepts"), {"query": "  \n"})


def test_the_document_prompt_lists_documents_with_citations_and_facts_after_the_header():
    doc = builtin("document-prompt")
    variables = {"query": "Who led {documents}?", "documents": ["one\ntwo", "three"], "facts": FACTS[:1]}
    text = doc.render(check(doc, variables).values(doc.placeholders))
    assert "Who led {documents}?" in text
    assert "[1] one two\n[2] three\n" in text  # one document a line, numbered by position
    assert "[fact: Angela Merkel head_of_government_of Germany]" in text
    assert "Graph context" not in text  # no at_time, no header
    # The instructions' example is no fact: a model copies an example fact as if it were one.
    alone = doc.render(check(doc, {"query": "q", "documents": ["one"]}).values(doc.placeholders))
    assert "[fact:" not in alone

    variables |= {"document_ids": ["a#0", "b#3"], "at_time": "2010-06-01"}
    text = doc.render(check(doc, variables).values(doc.placeholders))
    assert "[a#0] one two\n[b#3] three\n" in text
    assert f"{HEADER}\n[fact: Angela Merkel head_of_government_of Germany]" in text


# Words, sentences, scores.


def test_terms_are_case_folded_unicode_words_without_stopwords_plus_whole_identifiers():
    assert terms("What is the STRASSE in Zürich?") == ["strasse", "zürich"]
    assert terms("Straße") == ["strasse"]
    assert terms("What does __slots__ do in os.path.join?") == [
        "slots", "os", "path", "join", "__slots__", "os.path.join",
    ]
    assert terms("東京 and Köln") == ["東京", "köln"]
    assert terms("the of and which") == []


def test_sentences_split_at_ends_and_paragraphs_not_at_abbreviations():
    text = "First one. Second, e.g. with an abbreviation? Third!\nstill third.\n\nNew paragraph without end"
    assert list(sentences(text)) == [
        "First one.",
        "Second, e.g. with an abbreviation?",
        "Third! still third.",
        "New paragraph without end",
    ]


def test_bm25_prefers_rare_terms_and_ignores_repeats_in_the_query():
    passages = [["python", "list"], ["python", "dict"], ["python", "set"]]
    scores = bm25(["python", "dict", "dict"], passages)
    assert scores[1] > scores[0] == scores[2] > 0
    assert bm25([], passages) == [0.0, 0.0, 0.0] and bm25(["x"], []) == []


# Concepts.


def test_concepts_are_the_question_then_its_term_runs_each_once():
    assert extract("When was Angela Merkel head of government of Germany?", 8) == [
        "When was Angela Merkel head of government of Germany?",
        "Angela Merkel",
        "head",
        "government",
        "Germany",
    ]
    assert extract("What does __slots__ do, and os.path.join? And __slots__ again", 8) == [
        "What does __slots__ do, and os.path.join? And __slots__ again",
        "__slots__",
        "os.path.join",
    ]
    assert extract("machine learning models vs. Machine Learning Models", 8)[1:] == ["machine learning models"]


def test_the_number_of_concepts_is_bounded_and_zero_leaves_the_question_alone():
    question = "Compare apples, pears, plums, cherries, grapes and figs"
    assert extract(question, 0) == [question]
    assert extract(question, 2) == [question, "Compare apples", "pears"]
    assert extract("Merkel. Compare apples", 8)[1:] == ["Merkel", "Compare apples"]
    assert extract("Does Python 3.11 support C++ std::vector?", 8)[1:] == [
        "Python", "3.11", "support", "C++", "std::vector",
    ]
    assert extract("  a multi-line\n question  ", 0) == ["a multi-line question"]


# The extractive answer.


def test_the_answer_cites_the_most_relevant_sentences_and_facts():
    text = answer({"query": "Who was head of government of Germany?", "documents": MERKEL_DOCS,
                   "document_ids": MERKEL_IDS, "facts": FACTS})
    lines = text.split("\n")
    assert lines[0] == "The Bundestag elects the head of government of Germany. [politics#4]"
    assert "Angela Merkel was Chancellor of Germany from 2005 to 2021. [bio#0]" in lines
    assert "[fact: Angela Merkel head_of_government_of Germany]" in lines
    assert "Bananas" not in text and "potassium" not in text and "SPD" not in text  # nothing in common
    assert "Graph context" not in text
    # facts come after every document sentence
    assert max(i for i, line in enumerate(lines) if not line.startswith("[fact:")) < lines.index(
        "[fact: Angela Merkel head_of_government_of Germany]"
    )


def test_documents_are_cited_by_position_without_ids_and_the_sentence_count_is_bounded():
    docs = [f"Python tip {i}: use python well." for i in range(10)]
    text = answer({"query": "python tips", "documents": docs}, max_sentences=3)
    assert text.split("\n") == [
        "Python tip 0: use python well. [1]",
        "Python tip 1: use python well. [2]",
        "Python tip 2: use python well. [3]",
    ]  # equal scores: the first given come first


def test_a_sentence_found_in_two_documents_is_said_once_citing_both():
    text = answer({"query": "capital of Germany", "documents": ["Berlin is the capital of Germany.",
                   "Rain. Berlin is the capital of Germany."], "document_ids": ["a", "b"]})
    assert text == "Berlin is the capital of Germany. [a] [b]"


def test_a_signature_or_label_line_is_said_with_the_sentence_it_heads_and_never_alone():
    doc = ("str.casefold()\n\nReturn a casefolded copy of the string. Casefolded strings may be used for "
           "caseless matching.\n\nSee also:\n\nThe casefolding algorithm of the Unicode Standard.\n\nstr.center(width)")
    question = "What does str.casefold return, by which casefolding algorithm?"
    lines = answer({"query": question, "documents": [doc], "document_ids": ["s"]}).splitlines()
    assert lines[0] == ("str.casefold() — Return a casefolded copy of the string. Casefolded strings may be used "
                        "for caseless matching. [s]")  # the entry whole, up to the label that ends it
    assert "See also: The casefolding algorithm of the Unicode Standard. [s]" in lines
    assert not any(line.startswith(("str.center", "str.casefold() [s]", "See also: [s]")) for line in lines)


def test_a_line_of_under_four_words_is_never_said_alone():
    docs = ['"except" statement.', "import __future__", "The except clause of a try statement handles an error."]
    lines = answer({"query": "except statement import future", "documents": docs}).splitlines()
    assert lines == ["The except clause of a try statement handles an error. [3]"]


def test_the_snapshot_header_precedes_the_facts_only_with_at_time():
    base = {"query": "Merkel government", "documents": [], "facts": FACTS}
    assert "Graph context" not in answer(base)
    assert answer(base | {"snapshot_header": "As of some snapshot"}) == (
        "[fact: Angela Merkel head_of_government_of Germany]"
    )  # a header without at_time is not used
    assert answer(base | {"at_time": "2010-06-01"}) == f"{HEADER}\n[fact: Angela Merkel head_of_government_of Germany]"
    custom = answer(base | {"at_time": "2010-06-01", "snapshot_header": "Facts of graph v42 at 2010-06-01"})
    assert custom == "Facts of graph v42 at 2010-06-01\n[fact: Angela Merkel head_of_government_of Germany]"


def test_nothing_relevant_is_said_plainly():
    variables = {"query": "What is the speed of light?", "documents": MERKEL_DOCS, "facts": FACTS, "at_time": "2010"}
    assert answer(variables) == "No relevant information was found for: What is the speed of light?"
    assert answer({"query": "the of and", "documents": MERKEL_DOCS}).startswith("No relevant information")
    assert answer({"query": "Merkel", "documents": []}) == "No relevant information was found for: Merkel"


def test_a_long_sentence_is_cut_at_a_word_boundary():
    text = answer({"query": "zebra", "documents": ["zebra " + "stripes " * 200]}, max_sentence_chars=50)
    sentence, citation = text.rsplit(" ", 1)
    assert citation == "[1]" and sentence.endswith("…") and len(sentence) <= 50 and "stripe…" not in sentence


def test_a_sentence_cut_by_a_chunk_boundary_is_not_used_but_the_whole_ones_are():
    # Document-load cut the first document inside a sentence and the second short of its end.
    cut = ["or a list of slots, the class gets no __dict__ for its slots. A class with slots saves memory per "
           "instance.", "Slots are declared in the class body. The slots of a class save the memory of a"]
    text = answer({"query": "slots class memory", "documents": cut})
    assert text.splitlines() == ["A class with slots saves memory per instance. [1]",
                                 "Slots are declared in the class body. [2]"]


def test_a_sentence_cut_before_two_keywords_that_are_english_words_is_not_used():
    # "as if" is two keywords, but English ones: the chunk starts mid-sentence, not in code
    docs = ["as if each comparison were reversed. The sort method sorts the list in place."]
    assert answer({"query": "sort list reversed comparison", "documents": docs}).splitlines() == [
        "The sort method sorts the list in place. [1]"]
    docs = ["async def f(): await the sorted list, reversed. The method sorts the list in place."]
    assert answer({"query": "sort list reversed", "documents": docs}).splitlines()[0].startswith("async def f():")


def test_the_alternatives_of_a_grammar_rule_whose_head_a_chunk_boundary_cut_are_not_used():
    docs = ["| value_pattern\n                      | group_pattern\n                      | class_pattern\n\n"
            "A value pattern matches a value by equality, as a group pattern matches its inner pattern."]
    assert answer({"query": "value pattern group pattern", "documents": docs}).splitlines() == [
        "A value pattern matches a value by equality, as a group pattern matches its inner pattern. [1]"]


def test_code_that_starts_in_lower_case_is_whole():
    docs = ["if __debug__: raise AssertionError when the assertion fails. The assert statement checks it."]
    assert answer({"query": "__debug__ assertion", "documents": docs}).splitlines()[0].startswith("if __debug__:")


def test_a_sentence_a_code_display_interrupted_is_whole_again():
    doc = ("The debugger has many uses. The typical usage to break into the debugger is to insert:\n\n"
           "   import pdb; pdb.set_trace()\n\nOr:\n\n   breakpoint()\n\nat the location you want to break "
           "into the debugger, and then run the program.\n\nwhich nothing before it opens.")
    lines = answer({"query": "break into the debugger location", "documents": [doc]}).splitlines()
    assert lines[0] == ("The typical usage to break into the debugger is to insert: import pdb; pdb.set_trace() "
                        "Or: breakpoint() at the location you want to break into the debugger, and then run the "
                        "program. [1]")
    assert not any(line.startswith("which") for line in lines)


def test_a_list_items_number_is_not_taken_for_the_code_an_open_sentence_shows():
    doc = ('The execution of the "with" statement with one item proceeds as follows:\n\n1. The context '
           'expression is evaluated to obtain a context manager.\n\n2. The context manager is entered.')
    lines = answer({"query": "How does the with statement execute?", "documents": [doc]}).splitlines()
    assert 'The execution of the "with" statement with one item proceeds as follows: [1]' in lines
    assert not any(line.startswith(("1.", "2.")) or " 1. [" in line for line in lines)


def test_code_in_lower_case_is_whole_however_it_starts():
    for first in ("except E as N: foo", "iter = type(iter).__aiter__(iter)", "integer ::= decinteger",
                  "classmethod fromkeys(iterable[, value])"):
        docs = [f"{first} holds the iterable keys. The other sentence is here."]
        assert answer({"query": "iterable keys", "documents": docs}).splitlines()[0].startswith(first)


def test_a_sentence_cut_before_a_call_it_names_is_not_used():
    docs = ["calls f(x) on the iterable keys when the loop ends. The iterable keys are hashed."]
    assert answer({"query": "iterable keys", "documents": docs}).splitlines() == ["The iterable keys are hashed. [1]"]


def test_a_signature_of_four_words_heads_the_sentence_after_it():
    doc = "static str.maketrans(x[, y[, z]])\n\nThis static method returns a translation table."
    assert answer({"query": "maketrans translation table", "documents": [doc]}).splitlines() == [
        "static str.maketrans(x[, y[, z]]) — This static method returns a translation table. [1]"]


def test_an_emphasised_name_that_starts_a_sentence_is_quoted():
    docs = ["*width* is a decimal integer defining the minimum field width. The *fill* is any character."]
    assert answer({"query": "width decimal integer", "documents": docs}).splitlines()[0] == (
        '"width" is a decimal integer defining the minimum field width. [1]')


def test_the_reference_markup_is_shown_as_plain_text():
    docs = ['The value *n* is an integer. See ``__index__`` and **PEP 357** for the conversion of *n*.']
    # (a cross-reference, which an answer leaves out: shown here with every sentence picked said)
    assert answer({"query": "value n integer __index__ conversion", "documents": docs},
                  answering=False).splitlines() == [
        'See "__index__" and PEP 357 for the conversion of n. [1]', "The value n is an integer. [1]"]


def test_a_sentence_said_nearly_the_same_in_two_documents_is_said_once_citing_both():
    docs = ["A class with __slots__ saves memory per instance.", "Bananas are yellow.",
            "A class with __slots__ saves the memory per instance. It has no __dict__."]
    text = answer({"query": "__slots__ memory instance", "documents": docs, "document_ids": ["a#1", "b#2", "c#3"]})
    lines = text.splitlines()
    assert lines[0] == "A class with __slots__ saves memory per instance. [a#1] [c#3]"
    assert not any("saves the memory" in line for line in lines)


def test_diversity_picks_what_the_answer_does_not_say_yet_over_a_second_wording_of_it():
    docs = ["A generator function uses yield to produce its values lazily, one at a time.",
            "A generator function uses yield to produce values for a for loop.",
            "Each generator is an iterator, made by calling its function.", "Bananas are yellow.",
            "The sky is blue today."]
    variables = {"query": "How does a generator function use yield?", "documents": docs,
                 "document_ids": ["a#1", "b#2", "c#3", "d#4", "e#5"]}
    by_relevance = answer(variables, max_sentences=2, rank_weight=0, diversity=0).splitlines()
    balanced = answer(variables, max_sentences=2, rank_weight=0, diversity=1).splitlines()
    assert by_relevance[0] == balanced[0] == "A generator function uses yield to produce values for a for loop. [b#2]"
    assert by_relevance[1].endswith("[a#1]")  # the best two say nearly the same (2 words of 3 shared)
    assert balanced[1] == "Each generator is an iterator, made by calling its function. [c#3]"


def test_words_meet_on_their_stems_and_identifiers_stay_whole():
    assert stems("Casefolding globals called __getattr__ str.casefold") == [
        "casefold", "global", "call", "getattr", "str", "casefold", "__getattr__", "str.casefold"]
    docs = ["Names listed are declared for the block. Unrelated text about bananas.",
            "It means that the listed identifiers are interpreted as globals."]
    # "global" meets "globals" only as stems
    assert "globals" in answer({"query": "What does global mean?", "documents": docs})
    assert "globals" not in answer({"query": "What does global mean?", "documents": docs}, stems=False)


def test_the_sentence_a_signature_of_the_asked_name_heads_leads_the_answer():
    entry = ("object.__getattr__(self, name)\n\nCalled when the default attribute access fails with an "
             "AttributeError.\n\nobject.__setattr__(self, name, value)\n\nCalled when an attribute assignment "
             "is attempted.")
    talk = ('Note that if the attribute is found through the normal mechanism, "__getattr__()" is not called. '
            'Otherwise "__getattr__()" is called with "__getattr__" semantics.')
    query = "When is __getattr__ called?"
    lines = answer({"query": query, "documents": [talk, entry], "document_ids": ["talk#0", "entry#0"]}).splitlines()
    assert lines[0] == ("object.__getattr__(self, name) — Called when the default attribute access fails with an "
                        "AttributeError. [entry#0]")
    # the other signature defines another name: it leads nothing
    assert not lines[1].startswith("object.__setattr__")
    # off, the sentences that repeat the name outscore it
    off = answer({"query": query, "documents": [talk, entry], "document_ids": ["talk#0", "entry#0"]},
                 definitions_first=False).splitlines()
    assert off[0].endswith("[talk#0]")
    # a question naming no code leads with no definition
    plain_words = answer({"query": "When is an attribute assignment attempted?", "documents": [talk, entry]})
    assert plain_words.splitlines()[0].startswith("object.__setattr__")


def test_an_attribute_entry_of_the_asked_name_leads_the_answer_as_a_signature_does():
    entry = "object.__match_args__\n\n   This class variable can be assigned a tuple of strings."
    talk = ('"__match_args__[i]" must be a string; if not "TypeError" is raised. The number of patterns must '
            'not exceed the length of __match_args__.')
    lines = answer({"query": "What does __match_args__ do?", "documents": [talk, entry],
                    "document_ids": ["talk#0", "entry#0"]}).splitlines()
    assert lines[0] == "object.__match_args__ — This class variable can be assigned a tuple of strings. [entry#0]"


def test_an_entry_is_said_whole_up_to_the_next_entry_and_within_max_sentence_chars():
    entries = ('d[key]\n\n   Return the item of d with key key.  Raises a "KeyError" if key is not in the map.\n\n'
               'del d[key]\n\n   Remove "d[key]" from d.  Raises a "KeyError" if key is not in the map.')
    query = "What does d[key] do when key is missing?"
    lines = answer({"query": query, "documents": [entries], "document_ids": ["m#3"]}).splitlines()
    assert lines[0] == 'd[key] — Return the item of d with key key. Raises a "KeyError" if key is not in the map. [m#3]'
    assert 'del d[key] — Remove "d[key]" from d. Raises a "KeyError" if key is not in the map. [m#3]' in lines
    # its second sentence alone, in another document, is said once: in the entry, citing both
    both = answer({"query": query, "documents": [entries, 'Raises a "KeyError" if key is not in the map.'],
                   "document_ids": ["m#3", "m#4"]}).splitlines()
    assert both[0].endswith("not in the map. [m#3] [m#4]")
    assert not any(line.startswith("Raises") for line in both)
    # given first alone, it stays a line of its own citing both, and the entry ends before it: said once
    first = answer({"query": query, "documents": ['Raises a "KeyError" if key is not in the map.', entries],
                    "document_ids": ["m#4", "m#3"]}).splitlines()
    assert 'Raises a "KeyError" if key is not in the map. [m#4] [m#3]' in first
    assert "d[key] — Return the item of d with key key. [m#3]" in first
    # past max_sentence_chars, and off, the entry's first sentence is a line of its own
    for settings in ({"max_sentence_chars": 60}, {"entries": False}):
        alone = answer({"query": query, "documents": [entries], "document_ids": ["m#3"]}, **settings).splitlines()
        assert "d[key] — Return the item of d with key key. [m#3]" in alone, settings
    # prose is not an entry: its sentences stay lines of their own
    prose = answer({"query": "keys in the map", "documents": ["The map holds keys. Every key is unique."]})
    assert prose.splitlines() == ["The map holds keys. [1]", "Every key is unique. [1]"]


def test_a_sentence_that_defines_what_the_question_asks_to_have_defined_leads():
    docs = ['Note that there is nothing special about the statement: import __future__ is a future statement '
            'used by "__future__" imports in the future.',
            "A future statement is a directive to the compiler that a module should use a future release's syntax."]
    query = "What is a __future__ statement?"
    lines = answer({"query": query, "documents": docs, "document_ids": ["import#10", "future#0"]}).splitlines()
    assert lines[0].startswith("A future statement is a directive") and lines[0].endswith("[future#0]")
    # off, the sentence that repeats the question's words outscores the definition
    off = answer({"query": query, "documents": docs, "document_ids": ["import#10", "future#0"]},
                 definitions_first=False).splitlines()
    assert off[0].endswith("[import#10]")
    # a question that asks something else, or a sentence about something else, leads with nothing of the kind
    how = answer({"query": "How is a __future__ statement used?", "documents": docs, "document_ids": ["i", "f"]})
    assert how.splitlines()[0].endswith("[i]")
    assert asked_subject("What are generator expressions?") == asked_subject("Define generator expression.")
    assert asked_subject("What does nonlocal mean?") == frozenset({"nonloc"})
    assert asked_subject("What happens when a generator expression runs?") == frozenset()
    assert defined_subject("A future statement is not an import.") == frozenset()
    assert defined_subject("Generator expressions are lazy.") == asked_subject("What is a generator expression?")


def test_a_sentence_that_refers_back_is_said_with_the_sentence_before_it():
    doc = ("The global statement is a declaration which holds for the whole code block. It means that the "
           "listed identifiers are interpreted as globals. Its names must not be parameters. Globals are "
           "module attributes.")
    lines = answer({"query": "What does the global statement mean?", "documents": [doc],
                    "document_ids": ["g#0"]}).splitlines()
    assert lines[0] == ("The global statement is a declaration which holds for the whole code block. It means that "
                        "the listed identifiers are interpreted as globals. Its names must not be parameters. [g#0]")
    assert not any(line.startswith(("It means", "Its names")) for line in lines)
    assert "Globals are module attributes. [g#0]" in lines  # it names its subject: a sentence of its own
    # past max_sentence_chars the sentence stands alone; off, every sentence does
    short = answer({"query": "What does the global statement mean?", "documents": [doc]}, max_sentence_chars=100)
    assert "The global statement is a declaration which holds for the whole code block. [1]" in short.splitlines()
    assert any(line.startswith("It means that") for line in short.splitlines())
    # the same two sentences in another document: one line, citing both
    twice = answer({"query": "What does the global statement mean?", "documents": [doc, doc.replace("Globals", "G")],
                    "document_ids": ["g#0", "h#0"]}).splitlines()
    assert twice[0].endswith("Its names must not be parameters. [g#0] [h#0]")
    assert not any(line.startswith(("It means", "Its names")) for line in twice)
    off = answer({"query": "What does the global statement mean?", "documents": [doc]}, refer_back=False)
    assert "It means that the listed identifiers are interpreted as globals. [1]" in off.splitlines()


def test_a_sentence_that_names_only_what_was_not_said_is_not_used():
    # the chunk boundary cut the sentence "This" stands for; "It" is as often "it is said that"
    doc = ("and so the object lives on after its finaliser ran. This is called object resurrection. It is "
           "implementation-dependent whether a finaliser runs twice. Resurrected objects are finalised once.")
    lines = answer({"query": "What is object resurrection, and does a finaliser run twice?",
                    "documents": [doc]}).splitlines()
    assert not any(line.startswith("This is called") for line in lines)
    assert "It is implementation-dependent whether a finaliser runs twice. [1]" in lines
    assert "Resurrected objects are finalised once. [1]" in lines
    # one that cannot be joined to the sentence it refers to (too long together) is not said alone either
    long = ("The default value is evaluated once, when the function definition is executed, and the same object "
            "is used for each call. This matters when the default is a mutable object such as a list.")
    lines = answer({"query": "When is the default value evaluated?", "documents": [long]},
                   max_sentence_chars=150).splitlines()
    assert lines == ["The default value is evaluated once, when the function definition is executed, and the same "
                     "object is used for each call. [1]"]
    off = answer({"query": "What is object resurrection?", "documents": [doc]}, refer_back=False)
    assert "This is called object resurrection. [1]" in off.splitlines()


SEQUENCE_TABLE = """The operations of sequences:

+------------------+---------------------------+---------+
| Operation        | Result                    | Notes   |
+==================+===========================+=========+
| "len(s)"         | length of *s*             |         |
+------------------+---------------------------+---------+
| "s[i:j:k]"       | slice of *s* from *i* to  | (3)(5)  |
|                  | *j* with step *k*         |         |
+------------------+---------------------------+---------+
| "min(s)"         | smallest item of *s*      |         |
"""


def test_a_grid_table_is_said_a_row_a_line():
    lines = answer({"query": "How do I get a slice of s with a step?", "documents": [SEQUENCE_TABLE]}).splitlines()
    assert lines[0] == '"s[i:j:k]" — slice of s from i to j with step k. [1]'
    assert not any("|" in line or "+--" in line for line in lines)
    # the header row holds labels, the last row the chunk cut before its border: neither is said
    everything = answer({"query": "operation result length slice smallest", "documents": [SEQUENCE_TABLE]})
    assert "Operation" not in everything and "smallest" not in everything and '"len(s)" — length of s.' in everything


def test_a_table_stored_as_plain_text_is_said_a_row_a_line_and_a_row_cut_mid_line_is_not():
    stored = plain(SEQUENCE_TABLE)  # as document-load stores it: "*s*" is "s", a cell ends before its column
    assert "| length of s             |" in stored
    table = stored.index("+--")
    cut = "the row before, cut.        |\n" + stored[table:]  # a chunk that starts in a row's last line
    for text in (stored, cut):
        lines = answer({"query": "How do I get a slice of s with a step?", "documents": [text]}).splitlines()
        assert lines[0] == '"s[i:j:k]" — slice of s from i to j with step k. [1]'
        everything = answer({"query": "operation result length slice smallest row before cut", "documents": [text]})
        assert '"len(s)" — length of s. [1]' in everything.splitlines()
        assert "|" not in everything and "cut" not in everything


def test_an_evaluation_can_reweigh_the_scores_and_the_answer_follows_them():
    docs = ["Lists sort in place and return None.", "The sorted order of equal items is kept stable."]
    inp = check(builtin("document-prompt"), {"query": "How do lists sort?", "documents": docs})
    assert compose(inp, ExtractiveSettings(max_sentences=1)) == "Lists sort in place and return None. [1]"
    seen = []

    def meaning(found, scores, query):  # as a sentence model would: the second document's sentence first
        seen.append((query, [p.text for p in found], scores))
        return [0.0 if p.citation == "[1]" else 1.0 for p in found]

    assert compose(inp, ExtractiveSettings(max_sentences=1), meaning) == (
        "The sorted order of equal items is kept stable. [2]")
    assert seen[0][0] == "How do lists sort?" and seen[0][1] == docs and seen[0][2][0] > seen[0][2][1]


def test_a_padded_answer_loses_the_lines_that_meet_the_question_only_through_part_of_its_name():
    # "How is __index__ used?" ended with two lines about slicing: they share "index" with it, not the name
    docs = ['The value n is an integer, or an object implementing "__index__()".',
            'The arguments to the range constructor must be integers or objects that implement "__index__()".',
            'Sequences also support slicing: "a[i:j]" selects all items with index k such that i <= k < j.',
            "When used as an expression, a slice is a sequence of the same type: the index set is renumbered."]
    variables = {"query": "How is __index__ used?", "documents": docs, "document_ids": ["a#0", "b#0", "c#0", "c#1"]}
    assert answer(variables).splitlines() == [
        'The value n is an integer, or an object implementing "__index__()". [a#0]',
        'The arguments to the range constructor must be integers or objects that implement "__index__()". [b#0]']
    assert len(answer(variables, answering=False).splitlines()) == 4  # every sentence picked, as before


def test_a_question_about_a_name_alone_gets_only_the_lines_that_say_it():
    # "What is __debug__?" ended with pdb's post-mortem debugging; the README's "What does the with
    # statement do?" with a line that says "with" only as a preposition
    debug = ['In the current implementation, the built-in variable "__debug__" is "True" under normal circumstances.',
             "Assignments to __debug__ are illegal.",
             "When invoked as a module, pdb will automatically enter post-mortem debugging."]
    lines = answer({"query": "What is __debug__?", "documents": debug}).splitlines()
    assert sorted(lines) == [f"{debug[1]} [2]", f"{debug[0]} [1]"]
    with_docs = ['The "with" statement is used to wrap the execution of a block with methods of a context manager.',
                 'A Python program can also explicitly raise an exception with the "raise" statement.',
                 'Context managers are normally invoked using the "with" statement.']
    lines = answer({"query": "What does the with statement do?", "documents": with_docs}).splitlines()
    assert lines == [f"{with_docs[0]} [1]", f"{with_docs[2]} [3]"]
    # a question that says more than the name keeps a line that shares those words
    more = answer({"query": "What is __debug__ used for when an assert statement raises?", "documents": [
        "An assert statement raises AssertionError when its expression is false.", *debug]}).splitlines()
    assert "An assert statement raises AssertionError when its expression is false. [1]" in more


def test_an_operator_asked_about_as_a_symbol_must_be_shown_and_a_cross_reference_is_no_answer():
    docs = ['The power operator "**" binds more tightly than unary operators on its left.',
            'The "%" operator is also used for string formatting.', "See PEP 465 for details.",
            'The "@" (at) operator is intended to be used for matrix multiplication.']
    lines = answer({"query": "What is the @ operator for?", "documents": docs}).splitlines()
    assert lines == [f"{docs[3]} [4]"]
    # none answers by the rule: evidence was found all the same, so its best line stays, not "nothing found"
    best = answer({"query": "What is the @ operator for?", "documents": docs[:3]}).splitlines()
    assert len(best) == 1 and best[0].startswith(tuple(docs[:3])), best
    # "//" is not "/": a line is judged by the operator itself
    floor = answer({"query": "What does the / operator do?", "documents": [
        'The "//" operator divides integers to an integer.', 'The "/" operator divides integers to a float.']})
    assert floor.splitlines() == ['The "/" operator divides integers to a float. [2]']
    # a question that says more than the operator is answered in words too: the reference names it so
    words = answer({"query": "What does the // operator return for two integers?", "documents": [
        "Division of integers yields a float, while floor division of integers results in an integer."]})
    assert words == "Division of integers yields a float, while floor division of integers results in an integer. [1]"


def test_an_answer_whose_evidence_spans_several_lines_keeps_them_all():
    entry = ("object.__getattr__(self, name)\n\nCalled when the default attribute access fails with an "
             "AttributeError.\n\nobject.__setattr__(self, name, value)\n\nCalled when an attribute assignment "
             "is attempted.")
    talk = ['Note that if the attribute is found through the normal mechanism, "__getattr__()" is not called.',
            'If an "AttributeError" is raised and the object has a "__getattr__()" method, that method is called as '
            "a fallback.", "This is done both for efficiency reasons and because of the instance attributes."]
    lines = answer({"query": "When is __getattr__ called?", "documents": [entry, *talk]}).splitlines()
    assert lines[0].startswith("object.__getattr__(self, name) — Called when the default attribute access fails")
    assert f"{talk[0]} [2]" in lines and f"{talk[1]} [3]" in lines and len(lines) == 3
    # several concepts, in words: each line that shares the question's words stays
    docs = ['The optional "else" clause is executed if the control flow leaves the "try" suite and no exception '
            "was raised.", 'If "finally" is present, it specifies a cleanup handler.',
            'The "finally" clause is executed on the way out when a "return" statement is executed in the "try" suite.']
    query = "When does the else clause of a try run, and when does finally run?"
    assert sorted(answer({"query": query, "documents": docs}).splitlines()) == sorted(
        f"{d} [{n}]" for n, d in enumerate(docs, 1))


def test_what_a_question_names_is_read_from_its_words():
    from ragbus.prompt.extractive.answering import code_names, keyword_names, symbols

    assert code_names("How do str.split() and divmod() treat __index__ and with_traceback?") == {
        "str.split", "divmod", "__index__", "with_traceback"}
    assert code_names("How do I print a value in a fixed-width column?") == set()  # a hyphen makes no code
    assert code_names("How does async for use __aiter__/__anext__?") == {"__aiter__", "__anext__"}
    assert keyword_names("What does the with statement do, and the else clause?") == {"with", "else"}
    assert keyword_names("What happens with a statement?") == set()
    assert symbols("How do / and // differ, and how is % tied to //?") == {"/", "//", "%"}
    assert symbols("Why is -1**2 negative - and 2**-1 is 0.5?") == set()


def test_the_answer_is_the_same_every_time():
    variables = {"query": "Germany government Merkel capital", "documents": MERKEL_DOCS * 3, "facts": FACTS}
    first = answer(variables)
    assert all(answer(dict(variables)) == first for _ in range(5))


# The processor, over a private memory bus.


def processor(**settings) -> PromptProcessor:
    topic = f"prompt-{uuid.uuid4().hex[:8]}"
    return PromptProcessor("prompt", PromptSettings(topic=topic, group=topic, **settings))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prompt(tmp_path_factory):
    """One processor for the module, with the packaged templates plus one of the test's own."""
    directory = tmp_path_factory.mktemp("templates")
    for path in tpl.DEFAULT_DIR.glob("*.txt"):
        (directory / path.name).write_text(path.read_text())
    (directory / "greet.txt").write_text("Hello {name}! You asked: {query}")
    # Concepts on (the default is off): the module tests what extraction does.
    served = processor(templates_dir=str(directory), template_variables=["name"], handler_timeout_s=10,
                       max_concepts=8)
    async with serve(served, timeout=20) as client:
        yield client


@module_loop
async def test_extract_concepts_over_the_bus(prompt):
    result = await prompt.prompt("extract-concepts", {"query": "How does __slots__ save memory in CPython?"})
    assert result.response_type == "lines" and result.backend == "extractive"
    assert result.template_id == "extract-concepts" and result.error is None
    assert result.text.split("\n") == [
        "How does __slots__ save memory in CPython?", "__slots__", "save memory", "CPython",
    ]
    assert result.prompt_tokens == 0 and result.completion_tokens == 0


@module_loop
async def test_document_prompt_over_the_bus_with_ids_and_a_snapshot_header(prompt):
    result = await prompt.document_prompt(
        query="Who was head of government of Germany?",
        documents=MERKEL_DOCS,
        document_ids=MERKEL_IDS,
        facts=FACTS,
        at_time="2010-06-01",
        snapshot_header="Facts from graph snapshot 7 (2010-06-01)",
    )
    assert result.response_type == "text" and result.backend == "extractive"
    lines = result.text.split("\n")
    assert lines[0].endswith("[politics#4]")
    assert lines[-2:] == [
        "Facts from graph snapshot 7 (2010-06-01)", "[fact: Angela Merkel head_of_government_of Germany]",
    ]
    plain = await prompt.document_prompt(query="Who was head of government of Germany?", documents=MERKEL_DOCS)
    assert plain.text.split("\n")[0] == "The Bundestag elects the head of government of Germany. [2]"
    assert "Graph context" not in plain.text and "[fact:" not in plain.text


@module_loop
async def test_a_streamed_document_prompt_comes_one_cited_sentence_a_piece(prompt):
    variables = {"query": "Who was head of government of Germany?", "documents": MERKEL_DOCS,
                 "document_ids": MERKEL_IDS, "facts": FACTS}
    whole = await prompt.document_prompt(**variables)
    pieces = [p async for p in prompt.document_prompt_stream(**variables)]
    texts, final = [p.text for p in pieces[:-1]], pieces[-1].result
    assert final is not None and final.text == whole.text and final.backend == "extractive"
    # One line of the answer a piece, each sentence with its citation; joined, the whole answer.
    assert texts == [line + "\n" for line in whole.text.split("\n")[:-1]] + [whole.text.split("\n")[-1]]
    assert len(texts) > 1 and texts[0].rstrip().endswith("[politics#4]")
    # A refused request is one error piece, raised by the typed client.
    with pytest.raises(RemoteError, match="UnknownTemplate"):
        [p async for p in prompt.stream("summarise", {"query": "q"})]


@module_loop
async def test_any_other_template_answers_its_rendered_text(prompt):
    result = await prompt.prompt("greet", {"name": "Ada {query}", "query": "why {name}?", "unused": ["x"]})
    assert result.response_type == "text" and result.text == "Hello Ada {query}! You asked: why {name}?"


@module_loop
async def test_an_unknown_template_is_an_error_naming_the_known_ones(prompt):
    with pytest.raises(RemoteError) as caught:
        await prompt.prompt("summarise", {"query": "q"})
    assert caught.value.error.type == "UnknownTemplate"
    assert "'summarise'" in caught.value.error.message
    assert "known: condense-question, document-prompt, extract-concepts, greet" in caught.value.error.message


@module_loop
async def test_bad_variables_get_a_validation_error_and_the_processor_keeps_serving(prompt):
    with pytest.raises(RemoteError) as missing:
        await prompt.prompt("greet", {"query": "q"})
    assert missing.value.error.type == "ValidationError"
    assert "template 'greet' needs variable(s) name" in missing.value.error.message
    with pytest.raises(RemoteError) as wrong:
        await prompt.prompt("document-prompt", {"query": "q", "documents": ["a"], "document_ids": []})
    assert wrong.value.error.type == "ValidationError" and "0 document_ids for 1 documents" in wrong.value.error.message
    assert (await prompt.prompt("extract-concepts", {"query": "still here"})).text.startswith("still here")


@module_loop
async def test_a_100_kb_question_is_answered_within_the_timeout(prompt):
    question = " ".join(f"Why does {{query}} widget{i} jump over gadget{i} in Zürich?" for i in range(2000))[:100_000]
    documents = [*MERKEL_DOCS, "Frogs jump in Zürich."]
    started = time.perf_counter()
    concepts = await prompt.prompt("extract-concepts", {"query": question})
    answered = await prompt.document_prompt(query=question, documents=documents, facts=FACTS)
    took = time.perf_counter() - started
    lines = concepts.text.split("\n")
    assert lines[0] == " ".join(question.split()) and len(lines) == 1 + 8  # the question, then max_concepts
    assert answered.text == "Frogs jump in Zürich. [4]"
    assert took < 10, f"took {took:.1f}s"


@module_loop
async def test_nothing_of_a_request_stays_on_the_processor():
    served = processor()
    async with serve(served) as client:
        await client.prompt("extract-concepts", {"query": "warm up"})
        before = dict(vars(served))
        await client.document_prompt(query="Merkel", documents=MERKEL_DOCS, facts=FACTS, at_time="2010")
        await client.prompt("extract-concepts", {"query": "another question"})
        assert vars(served) == before


@module_loop
async def test_a_broken_template_stops_the_processor_from_starting(tmp_path):
    (tmp_path / "document-prompt.txt").write_text("Q: {question}")
    broken = processor(templates_dir=str(tmp_path))
    with pytest.raises(TemplateError, match=r"unknown placeholder '\{question\}'"):
        await broken.start()
    assert broken.backend is None


@module_loop
async def test_settings_from_a_file_and_the_environment(tmp_path):
    config = tmp_path / "ragbus.toml"
    config.write_text('[processors.prompt]\nclass = "ragbus.prompt:PromptProcessor"\n')
    built = build_processor(load_settings(config, environ={}), "prompt")
    assert isinstance(built, PromptProcessor)
    s = built.settings
    assert s.topic == "prompt" and s.backend == "extractive" and s.max_concepts == 0
    assert s.extractive.max_sentences == 5 and s.openai.max_retries == 3
    env = {
        "RAGBUS_PROCESSORS__PROMPT__MAX_CONCEPTS": "3",
        "RAGBUS_PROCESSORS__PROMPT__BACKEND": "openai",
        "RAGBUS_PROCESSORS__PROMPT__OPENAI__BASE_URL": "http://127.0.0.1:9/v1",
        "RAGBUS_PROCESSORS__PROMPT__EXTRACTIVE__MAX_SENTENCES": "2",
    }
    s = build_processor(load_settings(config, environ=env), "prompt").settings
    assert s.max_concepts == 3 and s.backend == "openai" and s.openai.base_url == "http://127.0.0.1:9/v1"
    assert s.extractive.max_sentences == 2
    with pytest.raises(SettingsError, match="backend"):
        build_processor(load_settings(config, environ={"RAGBUS_PROCESSORS__PROMPT__BACKEND": "gpt"}), "prompt")
    with pytest.raises(SettingsError, match="max_sentence"):
        build_processor(load_settings(config, environ={"RAGBUS_PROCESSORS__PROMPT__MAX_SENTENCE": "2"}), "prompt")


@module_loop
async def test_max_concepts_zero_switches_concepts_off():
    async with serve(processor(max_concepts=0)) as client:
        result = await client.prompt("extract-concepts", {"query": "Angela Merkel and Germany"})
    assert result.text == "Angela Merkel and Germany"


@module_loop
async def test_condense_question_over_the_bus_makes_a_follow_up_standalone(prompt):
    history = ["user: What is a lambda expression?", "assistant: Lambda expressions create anonymous functions."]
    result = await prompt.prompt("condense-question", {"query": "Can it contain statements?", "history": history})
    assert result.error is None and result.backend == "extractive" and result.template_id == "condense-question"
    assert result.text == "Can it contain statements? (lambda expression)"
    assert await prompt.condense("Can it contain statements?", history) == result.text
    with pytest.raises(RemoteError, match="needs variable\\(s\\) history"):
        await prompt.prompt("condense-question", {"query": "Can it contain statements?"})
