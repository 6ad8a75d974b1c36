#!/usr/bin/python3
"""A throwaway S3 store for tests: OpenStack Swift (Debian's python3-swift) with its s3api
middleware, four servers (proxy, account, container, object) on 127.0.0.1, one replica on
one plain directory. docs/testing.md describes it.

  s3-test-server.py setup DIR ACCOUNT_PORT CONTAINER_PORT OBJECT_PORT PROXY_PORT
      writes DIR/swift.conf, the four servers' configuration, the three rings and the
      device directory.
  s3-test-server.py run DIR SERVER PARENT_PID
      runs one server (account, container, object or proxy) of DIR in the foreground,
      logging to standard error, and prints `ready SERVER` once it accepts connections;
      it ends itself once it is no longer the child of PARENT_PID (the harness).
  s3-test-server.py serve [--bucket NAME]
      for people: sets up a temporary directory, starts the four servers, creates the
      bucket, prints the settings, and stops everything on SIGINT or SIGTERM.

The tests' harness (Tests/OutpostTestSupport/S3TestServer.swift) runs `setup`, then one
`run` child per server, each stopped by its own PID. It runs under /usr/bin/python3, the
interpreter Debian's python3-swift is installed for (another python3 on PATH lacks it).
"""
import json
import os
import signal
import socket
import sys
import time

# eventlet's green DNS resolver imports dnspython (and requests), a third of the time
# Swift takes to import on a busy machine; every address here is 127.0.0.1, never a name.
os.environ.setdefault('EVENTLET_NO_GREENDNS', 'yes')

ACCESS_KEY = 'test:tester'
SECRET_KEY = 'testing'
REGION = 'us-east-1'
SERVERS = ('account', 'container', 'object', 'proxy')

# What every server shares: one process (`workers = 0`: no forked worker, so the PID the
# harness holds is the server's), no mount check on the plain device directory, no
# fallocate reserve (a busy test disk is not full), the temporary directory's rings. A
# port another process took after the harness chose it is not freed by waiting (Swift
# would retry the bind for 30 s): it fails in 2 s, and the harness starts on new ports.
COMMON = """[DEFAULT]
bind_ip = 127.0.0.1
bind_port = {port}
bind_timeout = 2
workers = 0
swift_dir = {dir}
devices = {dir}/devices
mount_check = false
disable_fallocate = true
fallocate_reserve = 0
log_name = {server}-server
"""

BACKEND = COMMON + """
[pipeline:main]
pipeline = healthcheck {server}-server

[app:{server}-server]
use = egg:swift#{server}
{app_options}
[filter:healthcheck]
use = egg:swift#healthcheck
"""

# The object server updates the container listing as it stores an object, waiting 1 s by
# default and else leaving the update to a container updater, which does not run here: on
# a loaded machine a listing would then miss an object. 30 s keeps listings exact.
OBJECT_OPTIONS = 'container_update_timeout = 30\n'

# The proxy: s3api before the auth middleware (tempauth, whose one user is the S3 access
# key `test:tester` with secret `testing`) and SLO after it (s3api's multipart uploads are
# SLO manifests); the filters the proxy would otherwise insert itself are named in place.
# `cache` keeps tempauth's tokens in the proxy's memory (see MemoryCache). Timeouts are
# long: a loaded machine may take seconds to answer on loopback.
PROXY = COMMON + """
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo versioned_writes proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
conn_timeout = 5
node_timeout = 30

[filter:s3api]
use = egg:swift#s3api
location = {region}

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin

[filter:cache]
paste.filter_factory = outpost_s3_test_server:memory_cache_filter

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo

[filter:versioned_writes]
use = egg:swift#versioned_writes
"""

# Read from DIR instead of /etc/swift (see `run`): the hash suffix and the one policy.
SWIFT_CONF = """[swift-hash]
swift_hash_path_suffix = outpost-test

[storage-policy:0]
name = Policy-0
default = yes
"""


def setup(directory, ports):
    """Writes the configuration and the rings of a store whose servers listen on `ports`
    (a dict: server name to port)."""
    from swift.common.ring import RingBuilder
    os.makedirs(os.path.join(directory, 'devices', 'd1'), exist_ok=True)
    with open(os.path.join(directory, 'swift.conf'), 'w') as f:
        f.write(SWIFT_CONF)
    for server in SERVERS:
        template = PROXY if server == 'proxy' else BACKEND
        options = OBJECT_OPTIONS if server == 'object' else ''
        with open(os.path.join(directory, server + '-server.conf'), 'w') as f:
            f.write(template.format(port=ports[server], dir=directory, server=server, app_options=options, region=REGION))
    # One ring per backend, each of 2^10 partitions, one replica, on the one device: what
    # `swift-ring-builder X.builder create 10 1 1; ... add r1z1-127.0.0.1:PORT/d1 1;
    # ... rebalance` makes, in this one process instead of nine, with a fixed seed.
    for server in ('account', 'container', 'object'):
        builder = RingBuilder(10, 1, 1)
        builder.add_dev({'id': 0, 'region': 1, 'zone': 1, 'ip': '127.0.0.1', 'port': ports[server],
                         'replication_ip': '127.0.0.1', 'replication_port': ports[server],
                         'device': 'd1', 'weight': 1, 'meta': ''})
        builder.rebalance(seed=1)
        builder.get_ring().save(os.path.join(directory, server + '.ring.gz'))


class MemoryCache(object):
    """What tempauth and the proxy keep in memcached (`swift.cache`), in the proxy's memory:
    there is one proxy process, so a dict serves as memcached would, without a fifth
    process. Values are stored as JSON, as memcached's client stores them, so a caller
    never shares an object with the cache; `time` is memcached's expiry (seconds from now,
    or a Unix time past 30 days)."""

    def __init__(self):
        self.entries = {}

    def _expiry(self, ttl):
        ttl = float(ttl or 0)
        if ttl <= 0:
            return None
        return ttl if ttl > 30 * 24 * 3600 else time.time() + ttl

    def get(self, key, *args, **kwargs):
        entry = self.entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= time.time():
            del self.entries[key]
            return None
        return json.loads(value)

    def set(self, key, value, serialize=True, time=0, *args, **kwargs):
        self.entries[key] = (json.dumps(value), self._expiry(time))

    def delete(self, key, *args, **kwargs):
        self.entries.pop(key, None)

    def incr(self, key, delta=1, time=0, *args, **kwargs):
        value = int(self.get(key) or 0) + int(delta)
        value = max(value, 0)
        self.set(key, value, time=time)
        return value

    def decr(self, key, delta=1, time=0, *args, **kwargs):
        return self.incr(key, -int(delta), time)

    def get_multi(self, keys, server_key=None, *args, **kwargs):
        return [self.get(key) for key in keys]

    def set_multi(self, mapping, server_key=None, serialize=True, time=0, *args, **kwargs):
        for key, value in mapping.items():
            self.set(key, value, time=time)


def memory_cache_filter(global_conf, **local_conf):
    """The paste filter `cache` of the proxy's pipeline: puts one MemoryCache in every
    request's environment, where Swift's memcache middleware would put its client."""
    cache = MemoryCache()

    def middleware(app):
        def call(env, start_response):
            env['swift.cache'] = cache
            return app(env, start_response)
        return call
    return middleware


def watch_parent(parent, directory, server):
    """Ends this server when the process that started it is gone (a test run that crashed
    or was killed), so no server outlives its test process; checked every half second on
    the server's own event loop. The proxy also removes the store's directory then (the
    others may still write for half a second: whatever they leave is removed too late to
    matter, and `ignore_errors` keeps that from failing)."""
    import eventlet
    import shutil
    while os.getppid() == parent:
        eventlet.sleep(0.5)
    if server == 'proxy':
        shutil.rmtree(directory, ignore_errors=True)
    os.kill(os.getpid(), signal.SIGTERM)


def run(directory, server, parent):
    """Runs one server of `directory` in the foreground, for as long as it is the child
    of process `parent`; returns its exit status."""
    # The paste filter `cache` names this module: make it importable by that name.
    sys.modules['outpost_s3_test_server'] = sys.modules[__name__]
    from swift.common import utils
    # Swift reads swift.conf from /etc/swift, fixed in the module (servers only read the
    # rings from `swift_dir`); set before anything loads the storage policies from it.
    utils.SWIFT_CONF_FILE = os.path.join(directory, 'swift.conf')
    # Swift's loggers write to syslog (/dev/log, else UDP port 514); here a server's log
    # is its standard error only (`verbose` below), which the harness writes to a file.
    import logging
    utils.ThreadSafeSysLogHandler = lambda *args, **kwargs: logging.NullHandler()
    from swift.common import wsgi
    # eventlet's listen sets SO_REUSEPORT, which lets this server bind a port another
    # process (a test's outpost-server, whose first socket sets it once bound) already
    # holds, and then take half of its connections. Bound without it, a taken port fails
    # the bind ("Could not bind to"), and the harness starts again on other ports.
    listen = wsgi.listen
    wsgi.listen = lambda addr, **kwargs: listen(addr, reuse_port=False, **kwargs)
    signal_ready = wsgi.WorkersStrategy.signal_ready

    # Swift calls signal_ready once the listening socket is bound and the application
    # loaded, just before it serves: the harness waits for this line.
    def ready(strategy):
        try:
            sys.stdout.write('ready %s\n' % server)
            sys.stdout.flush()
        except OSError:
            pass  # the harness is gone, its end of the pipe closed: watch_parent ends this server
        import eventlet
        eventlet.spawn_n(watch_parent, parent, directory, server)
        signal_ready(strategy)
    wsgi.WorkersStrategy.signal_ready = ready
    options = {'verbose': True}
    if server == 'object':
        from swift.obj import server as object_server
        options['global_conf_callback'] = object_server.global_conf_callback
    return wsgi.run_wsgi(os.path.join(directory, server + '-server.conf'), server + '-server', **options)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def serve(bucket):
    """For people (scripts/s3-smoke.py, trying a client by hand): the store the harness
    starts, in the foreground until SIGINT or SIGTERM."""
    import shutil
    import subprocess
    import tempfile
    import urllib.request
    directory = tempfile.mkdtemp(prefix='outpost-s3-')
    ports = {server: free_port() for server in SERVERS}
    setup(directory, ports)
    children = {}
    stopping = []

    def stop(*_):
        stopping.append(True)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        started = time.time()
        for server in SERVERS:
            log = open(os.path.join(directory, server + '.log'), 'w')
            children[server] = subprocess.Popen([sys.executable, os.path.abspath(__file__), 'run', directory, server, str(os.getpid())],
                                                stdout=subprocess.PIPE, stderr=log)
        for server, child in children.items():
            line = child.stdout.readline().decode().strip()
            if line != 'ready ' + server:
                sys.exit('%s server did not start (%r); its log: %s/%s.log' % (server, line, directory, server))
        endpoint = 'http://127.0.0.1:%d' % ports['proxy']
        auth = urllib.request.urlopen(urllib.request.Request(
            endpoint + '/auth/v1.0', headers={'X-Auth-User': ACCESS_KEY, 'X-Auth-Key': SECRET_KEY}))
        token, storage = auth.headers['X-Auth-Token'], auth.headers['X-Storage-Url']
        urllib.request.urlopen(urllib.request.Request(storage + '/' + bucket, method='PUT', headers={'X-Auth-Token': token}))
        print('started in %.1f s; logs in %s' % (time.time() - started, directory))
        print('S3_ENDPOINT=%s' % endpoint)
        print('S3_BUCKET=%s' % bucket)
        print('S3_ACCESS_KEY=%s' % ACCESS_KEY)
        print('S3_SECRET_KEY=%s' % SECRET_KEY)
        print('S3_REGION=%s' % REGION)
        sys.stdout.flush()
        while not stopping:
            signal.pause()
    finally:
        for child in children.values():
            child.terminate()
        for child in children.values():
            child.wait()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv):
    if len(argv) == 7 and argv[1] == 'setup':
        setup(argv[2], dict(zip(SERVERS, (int(p) for p in argv[3:7]))))
        return 0
    if len(argv) == 5 and argv[1] == 'run' and argv[3] in SERVERS:
        return run(argv[2], argv[3], int(argv[4]))
    if len(argv) >= 2 and argv[1] == 'serve':
        bucket = argv[3] if len(argv) == 4 and argv[2] == '--bucket' else 'outpost-media'
        serve(bucket)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
