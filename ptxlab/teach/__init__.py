"""Teaching: learner-facing checks, HTML pictures, widgets, the course's exercises, and the tools
that build the course notebooks from their text forms.

Imports :mod:`ptxlab.run` and :mod:`ptxlab.model`, never the grader or the benchmark.
"""
