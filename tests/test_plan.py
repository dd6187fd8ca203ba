"""Plan expansion: stable ids, cartesian fan-out, dependent templates, and the worst-case credits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harvest.connectors.paging.pager import QuerySpec, asks_digest
from harvest.flows.run.plan import CostLine, Plan, base_id, instantiate, plan
from harvest.flows.spec import JobSpec, parse_spec
from tests.endpoints import PROFILE

HEAD = "name: job\nbudget: {credits: 100}\nqueries:\n"


def spec_of(queries: str, head: str = HEAD) -> JobSpec:
    return parse_spec(head + queries)


def test_static_fan_out_gives_one_query_per_value_with_readable_ids() -> None:
    result = plan(
        spec_of(
            "  - id: videos\n    endpoint: /v3/short-video/profile/videos\n"
            "    params: {sort_by: latest}\n    for_each: {handle: [nasa, esa]}\n    max_pages: 5\n"
        )
    )
    assert [q.query_id for q in result.queries] == ["videos[handle=nasa]", "videos[handle=esa]"]
    first = result.queries[0]
    assert isinstance(first, QuerySpec)
    assert first.params == {"handle": "nasa", "sort_by": "latest"}
    assert (first.endpoint, first.max_pages, first.max_credits) == (PROFILE, 5, None)
    assert result.template_of("videos[handle=esa]") == base_id("videos[handle=esa]") == "videos"


def test_several_static_keys_give_the_cartesian_product_in_sorted_key_order() -> None:
    result = plan(
        spec_of(
            "  - id: forum\n    endpoint: /v1/forum/subreddit/search\n    params: {query: shoes}\n"
            "    for_each:\n      subreddit: [running, trailrunning]\n      sort: [new, top, hot]\n"
        )
    )
    ids = [q.query_id for q in result.queries]
    assert len(ids) == 6 == len(set(ids))
    assert ids[0] == "forum[sort=new,subreddit=running]"
    assert "forum[sort=hot,subreddit=trailrunning]" in ids
    assert all(q.params["query"] == "shoes" for q in result.queries)


def test_ids_are_stable_across_plans_and_derived_when_absent() -> None:
    text = (
        "  - endpoint: /v1/pinboard/search\n    params: {query: shoes}\n    for_each: {trim: [true, false]}\n"
    )
    one, two = plan(spec_of(text)), plan(spec_of(text))
    assert [q.query_id for q in one.queries] == [q.query_id for q in two.queries]
    derived = spec_of(text).queries[0].query_id
    assert derived.startswith("pinboard_search-")
    assert [q.query_id for q in one.queries] == [f"{derived}[trim=true]", f"{derived}[trim=false]"]


def test_params_are_normalised_plain_data() -> None:
    result = plan(
        spec_of("  - id: c\n    endpoint: /v1/creative/materials\n    params: {query: ' shoes ', limit: 5}\n")
    )
    assert result.queries[0].params == {"query": "shoes", "limit": 5}


CREATIVES = (
    "  - id: creatives\n    endpoint: /v1/creative/materials\n    params: {query: shoes, limit: 50}\n"
    "    max_pages: 2\n"
)
DETAIL = (
    "  - id: detail\n    endpoint: /v1/creative/materials/{material_id}\n"
    "    for_each: {material_id: {from: creatives, field: material_id}}\n"
)


def test_dependent_queries_stay_templates_after_their_parent() -> None:
    result = plan(spec_of(DETAIL + CREATIVES))  # the child is written first: the plan orders it after
    assert [q.query_id for q in result.queries] == ["creatives"]
    (dep,) = result.dependents
    assert (dep.template_id, dep.parent, dep.field, dep.kind, dep.param) == (
        "detail",
        "creatives",
        "material_id",
        "creative_materials",
        "material_id",
    )
    assert result.children("creatives") == (dep,) == result.children("creatives[x=1]")
    assert result.children("detail") == ()


def test_dependent_chains_are_in_topological_order() -> None:
    text = (
        "  - id: replies2\n    endpoint: /v1/video-platform/video/comment/replies\n"
        "    for_each: {continuationToken: {from: replies1, field: id}}\n"
        "  - id: replies1\n    endpoint: /v1/video-platform/video/comment/replies\n"
        "    for_each: {continuationToken: {from: search, field: id, kind: video_platform_videos}}\n"
        "  - id: search\n    endpoint: /v1/video-platform/search\n    params: {query: x}\n    max_pages: 1\n"
    )
    result = plan(spec_of(text))
    assert [d.template_id for d in result.dependents] == ["replies1", "replies2"]
    assert result.worst_case is None  # the search's page size is not documented


def test_instantiate_names_the_parent_value_and_validates_it() -> None:
    (dep,) = plan(spec_of(CREATIVES + DETAIL)).dependents
    query = instantiate(dep, "video:abc")
    expected = QuerySpec("detail[material_id=video:abc]", dep.endpoint, {"material_id": "video:abc"})
    assert query == replace(expected, asks=asks_digest(dep.endpoint, {"material_id": "video:abc"}, None))
    with pytest.raises(ValueError, match=r"material_id='abc' from creatives\.material_id is not allowed"):
        instantiate(dep, "abc")
    with pytest.raises(ValueError, match="empty"):
        instantiate(dep, None)


def test_instantiate_keeps_static_params_and_caps() -> None:
    text = (
        "  - id: feed\n    endpoint: /v1/microblog-b/user/posts\n    params: {handle: a}\n    max_pages: 1\n"
        "  - id: posts\n    endpoint: /v1/microblog-b/post\n"
        "    for_each: {url: {from: feed, field: uri}}\n    max_credits: 3\n"
    )
    (dep,) = plan(spec_of(text)).dependents
    query = instantiate(dep, "at://x/post/1")
    assert (query.query_id, query.max_credits) == ("posts[url=at://x/post/1]", 3)


# ------------------------------------------------------------------------------------------ worst case
def line(result: Plan, query_id: str) -> CostLine:
    return next(x for x in result.lines if x.query_id == query_id)


def test_worst_case_per_paging_rule() -> None:
    text = (
        "  - id: clip\n    endpoint: /v1/streaming/clip\n    params: {url: u}\n"
        "  - id: pins5\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n    max_pages: 5\n"
        "  - id: pins_all\n    endpoint: /v1/pinboard/search\n    params: {query: b}\n"
        "  - id: pins_capped\n    endpoint: /v1/pinboard/search\n    params: {query: c}\n"
        "    max_pages: 50\n    max_credits: 7\n"
        "  - id: pins_credit_only\n    endpoint: /v1/pinboard/search\n    params: {query: d}\n"
        "    max_credits: 4\n"
    )
    result = plan(spec_of(text))
    assert line(result, "clip").worst_case == 1
    assert line(result, "pins5").worst_case == 5
    assert line(result, "pins_all").worst_case is None
    assert line(result, "pins_capped").worst_case == 7
    assert line(result, "pins_credit_only").worst_case == 4
    assert result.worst_case is None and not result.covered


def test_cost_overrides_scale_the_worst_case_and_zero_cost_is_free() -> None:
    head = (
        "name: job\nbudget: {credits: 12}\n"
        "costs:\n  /v1/pinboard/search: 3\n  /v1/streaming/clip: 0\nallow_lower_costs: true\nqueries:\n"
    )
    text = (
        "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n    max_pages: 4\n"
        "  - id: clip\n    endpoint: /v1/streaming/clip\n    params: {url: u}\n"
    )
    result = plan(spec_of(text, head))
    assert line(result, "pins").worst_case == 12
    assert line(result, "clip").worst_case == 0
    assert result.worst_case == 12 and result.covered


def test_dependent_worst_case_is_bounded_only_when_the_parent_is() -> None:
    bounded = plan(spec_of(CREATIVES + DETAIL))
    assert line(bounded, "creatives").worst_case == 2
    assert line(bounded, "detail[material_id=*]").worst_case == 100  # 2 pages x limit 50 materials, 1 each
    assert bounded.worst_case == 102 and not bounded.covered
    unbounded = plan(spec_of(CREATIVES.replace("    max_pages: 2\n", "") + DETAIL))
    detail = line(unbounded, "detail[material_id=*]")
    assert detail.dependent and detail.worst_case is None
    assert "one per creatives record" in detail.basis


def test_budget_override_and_greedy_verdict() -> None:
    text = "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n    max_pages: 5\n"
    assert plan(spec_of(text), budget=5).covered
    assert not plan(spec_of(text), budget=4).covered
    greedy = plan(spec_of(text, "name: job\nbudget: {credits: 1, policy: greedy}\nqueries:\n"))
    assert greedy.budget == 1 and greedy.policy == "greedy"


# --------------------------------------------------------------------- a fan-out's cap, what bounds a line
def test_max_credits_total_caps_a_fan_out_even_an_unbounded_one() -> None:
    unbounded = CREATIVES.replace("    max_pages: 2\n", "")
    result = plan(spec_of(unbounded + DETAIL + "    max_credits_total: 30\n"))
    detail = line(result, "detail[material_id=*]")
    assert detail.worst_case == 30 and "max_credits_total 30 for all" in detail.basis
    assert result.caps == {"detail": 30}
    fanned = plan(
        spec_of(
            "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n"
            "    for_each: {trim: [true, false]}\n    max_pages: 5\n    max_credits_total: 7\n"
        )
    )
    assert [x.worst_case for x in fanned.lines] == [5, 5]
    assert fanned.group_total("pins") == 7 == fanned.worst_case


def test_an_unbounded_line_names_what_would_bound_it() -> None:
    pins = plan(spec_of("  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n"))
    assert "max_pages or max_credits bounds it" in line(pins, "pins").basis
    search = (
        "  - id: search\n    endpoint: /v1/video-platform/search\n    params: {query: x}\n"
        "  - id: replies\n    endpoint: /v1/video-platform/video/comment/replies\n"
        "    for_each: {continuationToken: {from: search, field: id, kind: video_platform_videos}}\n"
    )
    basis = line(plan(spec_of(search)), "replies[continuationToken=*]").basis
    assert "search has no max_pages" in basis
    assert "/v1/video-platform/search declares no records_per_page" in basis
    assert "max_credits_total" in basis
    no_limit = CREATIVES.replace("    params: {query: shoes, limit: 50}\n", "    params: {query: shoes}\n")
    assert (
        "creatives sets no `limit` (its records_per_page)"
        in line(plan(spec_of(no_limit + DETAIL)), "detail[material_id=*]").basis
    )


# ------------------------------------------------------------------------- the worst case against the budget
def test_the_worst_case_against_a_short_budget_names_who_would_not_start() -> None:
    from harvest.flows.forecast.shortfall import shortfall

    text = CREATIVES + DETAIL + "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n"
    text += "    max_pages: 5\n"
    result = plan(spec_of(text), budget=20)
    assert result.worst_case == 2 + 100 + 5
    by_line = {o.line.query_id: o for o in shortfall(result).outcomes}
    # breadth-first: both planned queries take their first page (2), the 50 details the first creatives page
    # found start before anyone's second page: 18 of them; the second creatives page is never paid
    detail = by_line["detail[material_id=*]"]
    assert (detail.instances, detail.started, detail.not_started) == (100, 18, 82)
    assert by_line["creatives"].cut_short == 1 and by_line["pins"].cut_short == 1
    greedy = plan(spec_of(text, "name: job\nbudget: {credits: 20, policy: greedy}\nqueries:\n"))
    by_line = {o.line.query_id: o for o in shortfall(greedy).outcomes}
    # in spec order: creatives takes both pages (2), pins its 5, the details what is left
    assert by_line["creatives"].finished == by_line["pins"].finished == 1
    assert by_line["detail[material_id=*]"].started == 13


def test_a_fan_out_cap_leaves_its_own_queries_unstarted_not_the_others() -> None:
    from harvest.flows.forecast.shortfall import shortfall

    text = CREATIVES + DETAIL + "    max_credits_total: 10\n"
    text += "  - id: pins\n    endpoint: /v1/pinboard/search\n    params: {query: a}\n    max_pages: 5\n"
    result = plan(spec_of(text), budget=20)
    assert result.worst_case == 2 + 10 + 5 and result.covered
    result = plan(spec_of(text), budget=16)
    by_line = {o.line.query_id: o for o in shortfall(result).outcomes}
    detail = by_line["detail[material_id=*]"]
    assert (detail.instances, detail.started) == (100, 10)  # the cap, not the budget, stops them
    assert by_line["creatives"].finished == 1 and by_line["pins"].cut_short == 1  # 4 of its 5 pages


def test_a_wide_unbounded_plan_is_played_in_steps_not_page_by_page() -> None:
    from harvest.flows.forecast.shortfall import shortfall

    text = "".join(
        f"  - id: pins{n}\n    endpoint: /v1/pinboard/search\n    params: {{query: q{n}}}\n"
        for n in range(50)
    )
    outcome = shortfall(plan(spec_of(text), budget=10**9))
    assert outcome.known and outcome.spent == 10**9
    assert all(o.started == 1 and o.not_started == 0 for o in outcome.outcomes)
