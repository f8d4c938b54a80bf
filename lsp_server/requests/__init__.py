"""A request's way from its handler to the model thread and back, and the work done ahead of requests:
the pipeline (``pipeline.py``), a request's span (``span.py``), the two services (``completion_service.py``,
``next_edit_service.py``), the type-through cache (``type_through.py``), and the one scheduler of work
ahead (``work_ahead.py``: its order, its guard, giving way to requests) with what it starts
(``ahead.py``, ``rewrite_ahead.py``).
"""
