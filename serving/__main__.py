from .process_tree import stop_on_signals

stop_on_signals()  # before the slow imports: a stop while the server still imports is a stop too

from .server import main  # noqa: E402

main()
