"""The submission pipeline: a kernel admitted, recorded pending, configured, compiled, validated and timed, judged,
checked at other sizes and under the sanitizer, annotated, and recorded with its verdict. submit.py reads top to
bottom; each phase is a module of its own with typed records in and out."""
