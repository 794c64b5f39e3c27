"""The small collection and the questions a question's hops are timed on (bench_hops, trace_hops).

Three short documents, so retrieval and the prompt cost little and the hops between processors show.
"""

from ragbus.schema import Document

COLLECTION = "hops"
QUESTIONS = ["How does a context manager wrap a block of code?", "__slots__",
             "What does the else clause of a for loop do?", "When is __exit__ called?",
             "What saves memory per instance?"]
DOCUMENTS = [
    Document(document_id="with", title="with statement", collection=COLLECTION,
             text="The with statement wraps the execution of a block with methods defined by a context manager. "
                  "The context manager's __enter__ method is called before the block runs, and its __exit__ "
                  "method is called after it, even when the block raises an exception."),
    Document(document_id="slots", title="__slots__", collection=COLLECTION,
             text="__slots__ declares data members explicitly and denies the creation of __dict__ and __weakref__ "
                  "for each instance, which saves memory per instance and speeds up attribute lookup."),
    Document(document_id="for", title="for statement", collection=COLLECTION,
             text="The for statement iterates over the items of a sequence or other iterable. The else clause of a "
                  "for loop runs when the loop finishes without a break statement."),
]
