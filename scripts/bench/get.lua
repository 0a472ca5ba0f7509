-- wrk: GET one path (BENCH_PATH) over keep-alive connections; prints one JSON line.
local path = os.getenv("BENCH_PATH")

function request()
  return wrk.format("GET", path)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"non2xx":%d,"seconds":%.3f,"bytes":%d,"p50_ms":%.3f,"p99_ms":%.3f,"socket_errors":%d}\n',
    summary.requests, e.status, summary.duration / 1e6, summary.bytes, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, e.connect + e.read + e.write + e.timeout))
end
