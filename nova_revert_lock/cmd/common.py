# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""What ``nova-revert-lock check`` and ``status`` share."""

#: every host (or this one) is patched or already fixed
EXIT_OK = 0
#: anything else: refused, incomplete, disabled, unreachable, no host
EXIT_NOT_PROTECTED = 1
#: bad usage or unusable configuration
EXIT_USAGE = 2


def add_config_file_argument(parser, purpose='', needs=''):
    """``--config-file PATH`` (repeatable), as Nova's commands take it.

    :param purpose: what the file is read for (``' to read X from'``)
    :param needs: a sentence on the options the command needs
    """
    parser.add_argument(
        '--config-file', action='append', metavar='PATH',
        help='Nova configuration file%s (repeatable; default: the files '
             'nova-compute would find)%s' % (purpose, needs))


def config_args(config_files):
    """oslo.config command-line arguments for ``--config-file`` values."""
    return [arg for path in config_files or ()
            for arg in ('--config-file', path)]


def default_files(config_files):
    """None (oslo.config finds nova-compute's files) unless files are named."""
    return None if config_files is None else []


def positive_seconds(text):
    """argparse type: a number of seconds > 0."""
    import argparse
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not value > 0:
        raise argparse.ArgumentTypeError('must be a number of seconds > 0, '
                                         'not %r' % text)
    return value
