-- wrk script for bench-holds (one show, BENCH_EVENT) and bench-nodes (many, BENCH_EVENTS
-- comma-separated, each request on one drawn uniformly): POST /v1/events/{id}/holds with seats drawn like
-- loadgen/src/venue.rs (uniform, or 80% of requests on the front 10% of seats), as one of
-- many fans (tokens minted by `onsale-loadgen setup`), so the per-account cap stays out of it.
-- The request's fixed parts (seat names, the head up to each fan's token) are built once per
-- thread, so a request costs the client a few random draws and a few concatenations: its CPU goes
-- into sending, as pgbench's does in C.
local events = {}
for e in string.gmatch(os.getenv("BENCH_EVENTS") or os.getenv("BENCH_EVENT"), "[^,]+") do events[#events + 1] = e end
local nseats = tonumber(os.getenv("BENCH_SEATS") or "1")
local skewed = os.getenv("BENCH_DIST") == "skewed"
local tokens = {}
for line in io.lines(os.getenv("BENCH_TOKENS")) do tokens[#tokens + 1] = line end

local SEATS, ROWS, PER_ROW, HOT = 50000, 40, 50, 5000
local thread_no = 0
local heads, paths, names = {}, {}, {}

function setup(thread)
  thread:set("id", thread_no)
  thread_no = thread_no + 1
end

function init(args)
  math.randomseed(os.time() * 1000 + (id or 0) * 7919)
  local host = wrk.host .. ":" .. wrk.port
  for k, event in ipairs(events) do
    paths[k] = "POST /v1/events/" .. event .. "/holds HTTP/1.1\r\nHost: " .. host ..
      "\r\nContent-Type: application/json\r\nAuthorization: Bearer "
  end
  for k, token in ipairs(tokens) do heads[k] = token .. "\r\nContent-Length: " end
  for i = 0, SEATS - 1 do
    local section = 101 + math.floor(i / (ROWS * PER_ROW))
    local row = 1 + math.floor((i % (ROWS * PER_ROW)) / PER_ROW)
    names[i] = '"' .. section .. "-" .. row .. "-" .. (1 + i % PER_ROW) .. '"'
  end
end

function request()
  local i
  if skewed and math.random() < 0.8 then i = math.random(0, HOT - 1) else i = math.random(0, SEATS - 1) end
  local start = i - i % PER_ROW + math.min(i % PER_ROW, PER_ROW - nseats)
  local ids = names[start]
  for k = 1, nseats - 1 do ids = ids .. "," .. names[start + k] end
  local body = '{"seatIds":[' .. ids .. "]}"
  return paths[math.random(#paths)] .. heads[math.random(#heads)] .. #body .. "\r\n\r\n" .. body
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"non2xx":%d,"seconds":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,"socket_errors":%d}\n',
    summary.requests, e.status, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, e.connect + e.read + e.write + e.timeout))
end
