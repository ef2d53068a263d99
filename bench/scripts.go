package main

import (
	"os"
	"path/filepath"
)

// The wrk Lua scripts, one per scenario. Each thread seeds its own random
// generator from its thread number, and done() prints one RESULT line of JSON
// that the benchmark parses. Arguments after "--": the API key, then the
// number of pets in the database.

// luaCommon is shared by every scenario: argument parsing, seeding, the
// request headers and the RESULT line.
const luaCommon = `
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  key = args[1]
  n = tonumber(args[2])
  math.randomseed(tid * 7919 + os.time())
  get_headers = {Authorization = "Bearer " .. key}
  post_headers = {Authorization = "Bearer " .. key, ["Content-Type"] = "application/json"}
  counter = 0
  first_page = wrk.format("GET", "/v1/pets?limit=20", get_headers)
end

function get_pet()
  return wrk.format("GET", "/v1/pets/" .. math.random(1, n), get_headers)
end

function create_pet()
  counter = counter + 1
  local body = '{"name":"bench-' .. tid .. '-' .. counter .. '","categoryId":' .. (counter % 10 + 1) .. '}'
  return wrk.format("POST", "/v1/pets", post_headers, body)
end

local statuses = {"available", "pending", "sold"}

function list_deep()
  -- "Deep": an id in the second half of the table, a random status.
  local after = math.random(math.floor(n / 2), n)
  return wrk.format("GET", "/v1/pets?limit=20&status=" .. statuses[math.random(1, 3)] .. "&after=" .. after, get_headers)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,"non2xx":%d,"socket_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout, e.timeout))
end
`

// scenarioScripts maps each scenario to its request function.
var scenarioScripts = map[string]string{
	"list-first": `function request() return first_page end`,
	"list-deep":  `function request() return list_deep() end`,
	"get":        `function request() return get_pet() end`,
	// The same requests as get; the benchmark scrapes /metrics meanwhile.
	"get-scraped": `function request() return get_pet() end`,
	"create":      `function request() return create_pet() end`,
	// 90% reads split evenly between the first page and random gets, 10%
	// creates.
	"mix": `function request()
  local r = math.random(1, 100)
  if r <= 10 then return create_pet() end
  if r <= 55 then return first_page end
  return get_pet()
end`,
	// Selling pets: create a pet, place an order for it, deliver the order;
	// three requests per sale, each made from an earlier answer. A thread's
	// connections interleave, so the ids wait in queues: a request delivers
	// an order if one is waiting, else orders a pet if one is waiting, else
	// creates a pet.
	"sell": `local pets, orders = {}, {}
function request()
  if #orders > 0 then
    return wrk.format("PATCH", "/v1/store/orders/" .. table.remove(orders), post_headers, '{"status":"delivered"}')
  end
  if #pets > 0 then
    return wrk.format("POST", "/v1/store/orders", post_headers, '{"petId":' .. table.remove(pets) .. '}')
  end
  return create_pet()
end
function response(status, headers, body)
  if status ~= 201 then return end
  local id = string.match(body, '^{"id":(%d+)')
  if string.find(body, '"petId"', 1, true) then
    table.insert(orders, id)
  else
    table.insert(pets, id)
  end
end`,
}

// writeScripts writes each scenario's script into dir, as SCENARIO.lua,
// where runWrk finds it.
func writeScripts(dir string) error {
	for name, body := range scenarioScripts {
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(luaCommon+body+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
