-- wrk script of bench/dataplane.py: at the end, one line "JSON {...}" with the figures the bench
-- reads. Latencies are in microseconds; "quantiles" holds the latency at 0.1 %, 0.2 %, ... 100 %
-- so that the bench can merge the distributions of several wrk processes (one per client).

function done(summary, latency, requests)
  local e = summary.errors
  local quantiles = {}
  for i = 1, 1000 do
    quantiles[i] = string.format("%d", latency:percentile(i / 10))
  end
  io.write(string.format(
    'JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"max_us":%d,"mean_us":%.1f,"quantiles":[%s]}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.max, latency.mean, table.concat(quantiles, ",")))
end
