from tether.cli import entry

entry()
