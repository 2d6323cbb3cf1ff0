"""The retrieval eval's data: public question-answering documents with known supporting passages (built by
`build.py`, loaded by `items.py`)."""
