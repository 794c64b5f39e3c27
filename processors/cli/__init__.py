"""The `ragbus` command: one module per subcommand, wired together in main.py.

The top layer: commands may use everything below them (the bus, the
runtime, the processors), and nothing below imports a command.
"""
