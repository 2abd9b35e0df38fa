"""The command line (``cli``) and what only it uses: the demo, the reports, the docs listing, progress lines."""
