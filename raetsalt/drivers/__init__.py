"""Socket and clock drivers: the only modules that touch sockets or read clocks."""
