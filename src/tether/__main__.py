from tether.cli.app import entry

entry()
