"""The course's production and QA tools, for its authors: notebooks from their text forms
(``course_notebooks``), the learner's workspace made from them (``workspace``), the solution
cells as cases for tests and benchmarks (``course_cases``), and the mutants every check must
catch (``mutants``). They sit above ``ptxlab.teach``, whose exercises they read, and below the
grader and the benchmark, which use them."""
