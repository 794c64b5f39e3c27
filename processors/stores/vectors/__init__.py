"""A collection's chunk vectors searched with faiss: the files (``store.py``), the index a reader keeps
across generations (``index.py``), the settings of the processors over them (``settings.py``)."""
