"""The extractive condenser: which follow-ups lean on the conversation, and what they are given."""

from __future__ import annotations

import pytest

from ragbus.prompt.extractive.condense import leans, model_line, standalone, subject


@pytest.mark.parametrize("question", [
    "Can it contain statements?", "What does calling one return?", "And of a while loop?", "What about tuples?",
    "Why?", "Which of these is faster?",
])
def test_a_follow_up_with_a_pronoun_an_opener_or_too_few_words_leans(question):
    assert leans(question)


@pytest.mark.parametrize("question", [
    "What does the nonlocal statement do?", "How is __hash__ computed for a frozenset?",
    "Who was chancellor of Germany in 2010?",
])
def test_a_question_with_its_own_subject_stands_alone(question):
    assert not leans(question)


def test_the_subject_is_the_question_without_its_frame_names_and_identifiers_as_written():
    assert subject("What does the __slots__ declaration do?") == "__slots__ declaration"
    assert subject("Who was chancellor of Germany?") == "chancellor of Germany"
    assert subject("When does the else clause of a for loop run?") == "else clause of for loop run"


def test_a_leaning_follow_up_gets_the_subject_of_the_latest_user_question():
    history = ["user: What is a lambda expression?", "assistant: Lambda expressions create anonymous functions."]
    assert standalone("Can it contain statements?", history) == "Can it contain statements? (lambda expression)"


def test_answers_are_not_read_and_a_standalone_follow_up_is_kept_as_asked():
    history = ["user: What is a lambda expression?", "assistant: The with statement wraps a block."]
    assert "with" not in standalone("Can it contain statements?", history)
    assert standalone("What does the nonlocal statement do?", history) == "What does the nonlocal statement do?"
    assert standalone("Can it contain statements?", []) == "Can it contain statements?"


def test_a_chain_of_follow_ups_keeps_its_subject():
    history = ["user: What is a generator function?", "assistant: ...", "user: What does calling one return?",
               "assistant: ..."]
    assert "generator function" in standalone("Can it be restarted?", history)


def test_a_subject_the_follow_up_already_names_is_not_added_again():
    history = ["user: What does the with statement do?"]
    assert standalone("And the with statement's target?", history) == "And the with statement's target?"


def test_model_line_takes_the_first_line_without_label_or_quotes_else_the_question():
    assert model_line('Standalone question: "Can a lambda contain statements?"\nBecause...', "q?") == \
        "Can a lambda contain statements?"
    assert model_line("\n  \n", "Can it contain statements?") == "Can it contain statements?"
