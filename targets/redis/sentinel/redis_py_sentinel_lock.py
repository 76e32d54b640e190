#!/usr/bin/env python3
"""A splitbrain client adapter for redis-py's Lock on a Sentinel-managed Redis.

It is redis_py_lock.py (beside it in the client image) with one change: the
Redis it locks on is redis.sentinel.Sentinel(...).master_for(MASTER), which
asks the Sentinels (the endpoints of the hello request) for the primary and
follows it through failovers. Debian's python3-redis is all it needs.
"""
from redis.sentinel import Sentinel

import redis_py_lock

# The name the Sentinels monitor the primary by (sentinel.MasterName).
MASTER = "splitbrain"


class SentinelAdapter(redis_py_lock.Adapter):
    def hello(self, req):
        reply = super().hello(req)
        if reply.get("type") != "hello_ok":
            return reply
        sentinels = []
        for endpoint in req["endpoints"]:
            host, port = endpoint.rsplit(":", 1)
            sentinels.append((host, int(port)))
        sentinel = Sentinel(sentinels, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.redis = sentinel.master_for(MASTER, socket_timeout=0.5, socket_connect_timeout=0.5)
        return reply


if __name__ == "__main__":
    redis_py_lock.Adapter = SentinelAdapter
    redis_py_lock.main()
