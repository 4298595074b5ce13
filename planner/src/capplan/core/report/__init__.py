"""Pictures and summaries of a plan (pure): the HTML report of ``capplan report`` and the
Markdown of ``capplan matrix --format summary`` and ``capplan ci results``.

Each is a view of the same Plan and Matrix the text commands show (DESIGN.md): ``data``
gathers what they draw from those, and the renderers add no fact of their own.
"""
