"""The retrieval evaluation set (questions.jsonl and its loader) and the peer retrievers it is compared against."""
