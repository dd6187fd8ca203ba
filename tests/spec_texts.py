"""Job spec texts shared by the spec tests: a valid spec, its first lines, and invalid specs with the file line,
field and words their problem must name (`CASES`)."""

from __future__ import annotations

from tests.endpoints import PINS, PROFILE

HEAD = """\
name: brand-watch
budget:
  credits: 100
queries:
"""
"""Lines 1-4 of most specs below: their queries start on line 5."""

VALID = (
    HEAD
    + """\
  - id: videos
    endpoint: /v3/short-video/profile/videos
    params: {sort_by: latest}
    for_each: {handle: [nasa, esa]}
    max_pages: 5
  - id: creatives
    endpoint: /v1/creative/materials
    params: {query: shoes, limit: 50, style_tags: [ugc, testimonial]}
  - id: creative_detail
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: creatives, field: material_id}}
"""
)


CASES = {
    "unknown top key": (
        VALID + "colour: blue\n",
        16,
        "colour",
        ["unknown key 'colour'"],
        ["name", "budget", "queries", "concurrency"],
    ),
    "unknown query key": (
        HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: x}\n    max_page: 5\n",
        7,
        "queries[0].max_page",
        ["unknown key 'max_page' (the closest: max_pages"],
        ["max_pages", "max_credits", "for_each"],
    ),
    "parameter typo": (
        HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: x, trimm: true}\n",
        6,
        "queries[0].params.trimm",
        ["'trimm' is not a parameter of this endpoint (the closest: trim)"],
        ["query, cursor, trim"],
    ),
    "empty service block": (
        VALID.replace("budget:", "service:\nbudget:", 1),
        2,
        "service",
        ["empty: nothing is written under it (write its keys there, or leave it out)"],
        ["base_url", "api_key_env"],
    ),
    "bad name": (
        VALID.replace("name: brand-watch", "name: Brand Watch"),
        1,
        "name",
        ["'Brand Watch'"],
        ["lower-case letters, digits"],
    ),
    "unknown endpoint with suggestion": (
        HEAD + "  - endpoint: /v3/short-video/profile/video\n    params: {handle: nasa}\n",
        5,
        "queries[0].endpoint",
        ["unknown endpoint '/v3/short-video/profile/video'"],
        [PROFILE, "harvest endpoints"],
    ),
    "bad param type": (
        HEAD + "  - endpoint: /v1/creative/materials\n    params:\n      query: x\n      limit: many\n",
        8,
        "queries[0].params.limit",
        ["'many'"],
        ["an integer", "from 1 to 100"],
    ),
    "enum outside allowed values": (
        HEAD + "  - endpoint: /v3/short-video/profile/videos\n    params: {handle: nasa, sort_by: oldest}\n",
        6,
        "queries[0].params.sort_by",
        ["'oldest' is not allowed"],
        ["latest, popular"],
    ),
    "limit out of range": (
        HEAD + "  - endpoint: /v1/creative/materials\n    params:\n      limit: 500\n",
        7,
        "queries[0].params.limit",
        ["less than or equal to 100", "500"],
        ["from 1 to 100"],
    ),
    "missing required param": (
        HEAD + "  - id: vids\n    endpoint: /v3/short-video/profile/videos\n    params: {sort_by: latest}\n",
        7,
        "queries[0].params.handle",
        ["required parameter 'handle' is missing"],
        ["handle (required): text"],
    ),
    "neither of two identifiers": (
        HEAD + "  - endpoint: /v1/network-a/group/posts\n    params: {sort_by: TOP_POSTS}\n",
        6,
        "queries[0].params",
        ["give at least one of: url, group_id"],
        ["url, group_id"],
    ),
    "for_each on a non-parameter": (
        HEAD + "  - endpoint: /v3/short-video/profile/videos\n    for_each:\n      handel: [nasa]\n",
        7,
        "queries[0].for_each.handel",
        ["'handel' is not a parameter of /v3/short-video/profile/videos"],
        ["handle", "user_id", "sort_by"],
    ),
    "for_each from an unknown query": (
        VALID.replace("{from: creatives,", "{from: creative,"),
        15,
        "queries[2].for_each.material_id.from",
        ["no query has id 'creative'"],
        ["creatives"],
    ),
    "field not in the parent's kinds": (
        VALID.replace("field: material_id}", "field: materialId}"),
        15,
        "queries[2].for_each.material_id.field",
        ["'materialId' is not a column of creative_materials"],
        ["material_id", "title"],
    ),
    "for_each from a number column": (
        VALID.replace("field: material_id}", "field: relevance}"),
        15,
        "queries[2].for_each.material_id.field",
        ["'relevance' is a number column; a dependent query fans out over text or integer columns only"],
        ["material_id", "title"],
    ),
    "cycle": (
        HEAD
        + """\
  - id: a
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: b, field: material_id}}
  - id: b
    endpoint: /v1/creative/materials/{material_id}
    for_each: {material_id: {from: a, field: material_id}}
""",
        7,
        "queries[0].for_each.material_id.from",
        ["cycle: a -> b -> a"],
        ["does not depend on this one"],
    ),
    "duplicate ids": (
        HEAD
        + "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n"
        + "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: b}\n",
        8,
        "queries[1].id",
        ["duplicate id 'pins', also used by queries[0]"],
        ["a unique `id`"],
    ),
    "negative budget": (
        VALID.replace("credits: 100", "credits: -5"),
        3,
        "budget.credits",
        ["greater than or equal to 1", "-5"],
        ["an integer", "from 1 to 1000000000000000"],
    ),
    "budget of 0": (  # a run that may pay nothing collects nothing: a green night would hide it
        VALID.replace("credits: 100", "credits: 0"),
        3,
        "budget.credits",
        ["greater than or equal to 1", "0"],
        ["an integer", "from 1 to 1000000000000000"],
    ),
    "budget past what a run counts": (  # validated, then crashed the run writing its manifest
        VALID.replace("credits: 100", "credits: 99999999999999999999999"),
        3,
        "budget.credits",
        ["less than or equal to 1000000000000000", "99999999999999999999999"],
        ["an integer", "from 1 to 1000000000000000"],
    ),
    "concurrency out of range": (
        VALID + "concurrency: 65\n",
        16,
        "concurrency",
        ["65"],
        ["from 1 to 64"],
    ),
    "fanned-out value outside allowed values": (
        VALID.replace(
            "params: {sort_by: latest}\n    for_each: {handle: [nasa, esa]}",
            "for_each:\n      handle: [nasa]\n      sort_by:\n        - latest\n        - newest",
        ),
        11,
        "queries[0].for_each.sort_by[1]",
        ["'newest' is not allowed"],
        ["latest, popular"],
    ),
    "for_each value neither list nor from": (
        VALID.replace("{handle: [nasa, esa]}", "{handle: nasa}"),
        8,
        "queries[0].for_each.handle",
        ["expected a list of values or {from: <query id>, field: <column>}"],
        ["{from: <query id>, field: <column>}"],
    ),
    "unquoted boolean for a text": (
        HEAD + "  - endpoint: /v1/photo-app/user/embed\n    params: {handle: no}\n",
        6,
        "queries[0].params.handle",
        ["quote the value"],
        ["text"],
    ),
    "unknown endpoint in costs": (
        VALID + "costs:\n  /v1/pinboard/serch: 2\n",
        17,
        'costs["/v1/pinboard/serch"]',
        ["unknown endpoint '/v1/pinboard/serch'"],
        [PINS],
    ),
    "base_url neither URL nor sandbox": (
        VALID.replace("budget:", "service: {base_url: localhost}\nbudget:"),
        2,
        "service.base_url",
        ["the URL does not start with http:// or https:// (the URL is not shown"],
        ["`sandbox`"],
    ),
    "duplicate YAML key": (
        VALID + "name: other\n",
        16,
        "name",
        ["duplicate key 'name'"],
        ["each key once"],
    ),
    "cost below the catalog's price": (
        VALID + "costs:\n  /v1/pinboard/search: 0\n",
        17,
        'costs["/v1/pinboard/search"]',
        ["0 is below the catalog's price of 1 credit", "spend past it"],
        [">= 1", "allow_lower_costs: true"],
    ),
    "max_credits below the price of one request": (
        HEAD
        + "  - id: ads\n    endpoint: /v1/search-engine/company/ads\n"
        + "    params: {topic: all, get_ad_details: true}\n    for_each: {domain: [a.com, b.com]}\n"
        + "    max_credits: 10\n",
        9,
        "queries[0].max_credits",
        ["10 is below the price of one request", "costs 25 credits a request", "could never send one"],
        ["an integer >= 25, or no max_credits"],
    ),
    "max_credits below the price the job's costs set": (
        HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: x}\n    max_credits: 1\n"
        "costs:\n  /v1/pinboard/search: 2\n",
        7,
        "queries[0].max_credits",
        ["1 is below the price of one request", "costs 2 credits a request"],
        [">= 2, or no max_credits"],
    ),
    "credential before the host in base_url": (
        VALID.replace("budget:", "service: {base_url: 'http://user:s3cr3t-pass@api.example'}\nbudget:"),
        2,
        "service.base_url",
        ["carries a credential before the host", "not shown"],
        ["without credentials"],
    ),
    "key in the query string of base_url": (
        VALID.replace("budget:", "service: {base_url: 'https://api.example/?api_key=s3cr3t-key'}\nbudget:"),
        2,
        "service.base_url",
        ["credential in its query string (api_key, not shown)"],
        ["without credentials or query string"],
    ),
    "escaped control character in a value": (
        VALID.replace("{query: shoes,", '{query: "sho\\ees",'),
        12,
        "queries[1].params.query",
        ["control character U+001B (ESC) at column 25, written as \\e"],
        ["printable text"],
    ),
    "cron field out of range": (
        VALID + 'schedule: {cron: "99 99 * * *"}\n',
        16,
        "schedule.cron",
        ["'99 99 * * *' is not a valid cron expression", "out of range"],
        ["minute 0-59", "hour 0-23", "weekday 0-6"],
    ),
    "cron with four fields": (
        VALID + 'schedule: {cron: "0 3 * *"}\n',
        16,
        "schedule.cron",
        ["not a five-field cron expression"],
        ["minute 0-59"],
    ),
    "hashed cron": (
        VALID + 'schedule: {cron: "H 3 * * *"}\n',
        16,
        "schedule.cron",
        ["random and hashed fields (H, R) are not supported"],
        ["minute 0-59"],
    ),
    "unknown time zone": (
        VALID + 'schedule: {cron: "0 3 * * *", timezone: Mars/Olympus}\n',
        16,
        "schedule.timezone",
        ["'Mars/Olympus' is not an IANA time zone"],
        ["Europe/Berlin"],
    ),
    "interval below a minute": (
        VALID + "schedule: {interval: 30}\n",
        16,
        "schedule.interval",
        ["greater than or equal to 60", "30"],
        [">= 60"],
    ),
    "interval as text": (
        VALID + 'schedule: {interval: "3600"}\n',
        16,
        "schedule.interval",
        ["valid integer"],
        [">= 60"],
    ),
    "both cron and interval": (
        VALID + 'schedule: {cron: "0 3 * * *", interval: 3600}\n',
        16,
        "schedule",
        ["give exactly one of cron or interval"],
        ["cron", "interval"],
    ),
    "unknown schedule key": (
        VALID + "schedule: {every: 3600}\n",
        16,
        "schedule.every",
        ["unknown key 'every'"],
        ["cron", "interval", "timezone"],
    ),
    "unknown runner kind": (
        VALID + "runner: {kind: spark}\n",
        16,
        "runner.kind",
        ["'spark' is not allowed"],
        ["'local'", "'dask'"],
    ),
    "no workers": (
        VALID + "runner: {kind: dask, workers: 0}\n",
        16,
        "runner.workers",
        ["greater than or equal to 1", "0"],
        ["from 1 to 64"],
    ),
    "no pages per round": (
        VALID + "runner: {kind: dask, round_pages: 0}\n",
        16,
        "runner.round_pages",
        ["greater than or equal to 1"],
        ["from 1 to 10000"],
    ),
    "address without dask": (
        VALID + "runner: {address: 'tcp://10.0.0.5:8786'}\n",
        16,
        "runner",
        ["an address needs kind: dask"],
        ["kind", "address", "workers"],
    ),
    "address that is no scheduler": (
        VALID + "runner: {kind: dask, address: '10.0.0.5:8786'}\n",
        16,
        "runner",
        ["'10.0.0.5:8786' is not a Dask scheduler address"],
        ["kind", "address"],
    ),
    "unknown runner key": (
        VALID + "runner: {kind: dask, nodes: 3}\n",
        16,
        "runner.nodes",
        ["unknown key 'nodes'"],
        ["kind", "address", "workers", "round_pages"],
    ),
    "missing budget": (
        VALID.replace("budget:\n  credits: 100\n", ""),
        1,
        "budget",
        ["required, but missing"],
        ["credits", "min_balance", "policy"],
    ),
    "a fan-out cap on a query that makes one": (
        HEAD + "  - endpoint: /v1/pinboard/search\n    params: {query: x}\n    max_credits_total: 5\n",
        7,
        "queries[0].max_credits_total",
        ["caps all the queries a for_each makes together"],
        ["`max_credits` for one query", "for_each"],
    ),
    "an exit code for unstarted queries that is not harvest's": (
        VALID.replace("  credits: 100\n", "  credits: 100\n  unstarted_exit_code: 4\n"),
        4,
        "budget.unstarted_exit_code",
        ["4"],
        ["0", "3"],
    ),
}
