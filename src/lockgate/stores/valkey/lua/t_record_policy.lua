-- Record a workflow's policy as its current one. A(1) name  A(2) the policy (JSON)
redis.call('SET', K('policy', A(1)), A(2))
return 'OK'
