"""The sentence-model measurement's own parts: the model's cosines, and answers re-weighed by them."""

from __future__ import annotations

import msgspec
import pytest

from ragbus.embed.onnx_backend import default_model_path, default_vocab_path
from ragbus.prompt.extractive.answer import Passage
from ragbus.prompt.settings import ExtractiveSettings
from scripts.eval import evalset
from scripts.eval_sentence_meaning import Recorded, SentenceModel, answered, record, reweigh_by


def test_a_paraphrase_is_nearer_than_an_unrelated_sentence_and_reweighing_brings_it_first():
    model = SentenceModel(default_model_path(), default_vocab_path(), "mean", "")
    query = "Why does ordering a list in place hand back nothing?"
    near = Passage("The sort method modifies the sequence it is given and does not return it.", "[a#0]", False)
    far = Passage("The reference lists the simple statements in the order of the grammar, in place of a table.",
                  "[b#0]", False)
    cos = model.cosines(query, [near, far])
    assert cos[0] > cos[1] and abs(float(model.vector(near.text) @ model.vector(near.text)) - 1) < 1e-5
    # words alone score the unrelated sentence higher here; the cosine, weighed in, turns that round
    reweigh = reweigh_by(model, "z", 2.0)
    assert reweigh([near, far], [0.5, 1.0], query)[0] > reweigh([near, far], [0.5, 1.0], query)[1]
    inputs = [Recorded("q", query, [("b#0", far.text), ("a#0", near.text)])]
    plain = answered(inputs, ExtractiveSettings(max_sentences=1))["q"]
    weighed = answered(inputs, ExtractiveSettings(max_sentences=1), reweigh)["q"]
    assert [c.chunk_id for c in weighed.chunks] == ["b#0", "a#0"]
    assert plain.answer == f"{far.text} [b#0]"  # the words: "lists", "order", "place"
    assert weighed.answer == f"{near.text} [a#0]" and weighed.cited == ["a#0"]


def test_inputs_recorded_for_other_questions_are_refused_not_reused(tmp_path):
    questions = evalset.load_questions()[:2]
    path = tmp_path / "inputs.json"
    path.write_bytes(msgspec.json.encode([Recorded(q.id, q.question, []) for q in questions]))
    assert [r.id for r in record(path, tmp_path / "data", questions)] == [q.id for q in questions]
    with pytest.raises(SystemExit, match="other questions"):
        record(path, tmp_path / "data", questions[:1])
