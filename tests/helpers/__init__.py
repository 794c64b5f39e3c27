"""What several test modules share: processors served for a test, pipelines, corpora, bounded waits.

A test module imports these, never another test module.
"""
