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

# NOTE: eventlet must patch the standard library before anything imports
# oslo.context, oslo.db or Nova, as Nova's own test packages make sure of.
# Otherwise the thread-local stores those create at import time are shared
# by every greenthread: two greenthreads using one request context (the
# build's asynchronous network allocation does) then share a database
# transaction, and the instance info cache update fails with "Can't start
# a SAVEPOINT transaction when no existing transaction is in progress".
# The test runner imports this package before any test module.
# Up to 31.x importing nova.monkey_patch patches; from 32 on it only
# defines patch(), which Nova's own test packages call (nova.test, and
# nova/tests/unit/__init__.py; nova/tests/functional/__init__.py too from
# 34): without the call here, a test module of ours that imported oslo.db
# before nova.test had its transaction contexts shared by every
# greenthread, and a test failed now and then with "Can't upgrade a
# READER transaction to a WRITER".
from nova import monkey_patch  # noqa: E402

if hasattr(monkey_patch, 'patch'):
    monkey_patch.patch()
