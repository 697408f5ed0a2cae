"""What agent turns spend: the records and their protocol, the meter that checks limits before a turn, `switchyard
usage`."""
