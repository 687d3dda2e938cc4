"""``make demo`` tells the whole story and ends cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raetsalt.saltbridge.modes import salt_importable

pytestmark = pytest.mark.integration


def test_demo_runs_end_to_end() -> None:
    done = subprocess.run([sys.executable, "-m", "raetsalt.demo"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for fragment in [
        "raetsalt-key -c", "Key for minion minion3 accepted.",
        "'*' test.ping\n", "    minion3:\n        True",
        "-C 'G@roles:web and not minion3' grains.item os\n    minion1:",
        "publish.publish 'minion[23]' test.ping\n    local:\n        ----------\n"
        "        minion2:\n            True\n        minion3:\n            True",
        "publish.runner manage.up\n    local:\n        - minion1\n        - minion2\n"
        "        - minion3",
        "ERROR: peer publish of 'cmd.run' to 'minion1' (glob) denied",
        "(exit code 1)",
        "[WARNING ]", "rule: peer['minion2$'] -> 'G@roles:db' -> 'test.ping'",
        "1 x raetsalt/peer/minion2/denied",
        "-d minion3 -y\n    The following keys are going to be deleted:",
        "    Unaccepted Keys:\n    minion3\n    Rejected Keys:",
        "master minion3 test.ping\n    minion3:\n        True",
        "raetsalt-master master: exit 0",
        "--return=master_bus --tag=monitoring test.echo 'procs ok' --out txt\n",
        "    on the master's bus, tag monitoring: minion3 returned 'procs ok'\n",
        " 3 x monitoring\n",
        "the REST API: raetsalt-api serves", "listening: open http://127.0.0.1:",
        "perms ['.*', '@runner', '@wheel']", '{"return": [["minion1", "minion2", "minion3"]]}',
        "raetsalt-api api: exit 0",
        "minion4: master: ['127.0.0.1:", "], master_type: failover",
        "/west '*' test.ping\n    minion5:\n        True\n    (west has only minion5",
        "s after the kill)\n$ raetsalt -c ",
        "raetsalt-minion minion4: exit 0", "raetsalt-master west: exit 0",
    ]:
        assert fragment in out, fragment
    # The demo waits for the master's bus before subscribing: no warning about it.
    assert "cannot be reached" not in out + done.stderr
    if salt_importable():
        for fragment in [
            "-I team:blue test.ping\n    minion1:\n        True",
            "Hello from minion1 (", "), team blue\n",
            "    Summary for minion1\n    ------------\n    Succeeded: 2 (changed=2)\n",
            "state.apply motd test=True\n",
            "    Summary for minion1\n    ------------\n    Succeeded: 2\n    Failed:    0\n",
            "    reacted-minion2: minion2 started; the reactor ran this\n",
            "a scheduled job: minion1 runs test.echo every 2 s by itself",
            "    schedule:                 # Salt's scheduler, in minion1's config\n",
            "watching for the next ones)\n",
            "s] on the master's bus: salt/job/",
            "jobs.lookup_jid 2", "    minion1:\n        scheduled heartbeat\n",
        ]:
            assert fragment in out, fragment
