"""placeholder"""


def add_parsers(sub):
    pass
