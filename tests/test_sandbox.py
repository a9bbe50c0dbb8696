"""The sandbox tools and the validator's scorer, against hand-worked cases of every rule."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from shopdistill_assets.sandbox import Catalog, Problem, Sandbox, score_recommendation, score_trace_calls
from shopdistill_assets.sandbox.catalog import load_catalog, write_catalog
from shopdistill_assets.sandbox.safe_math import UnsafeExpression, evaluate
from shopdistill_assets.sandbox.scorer import parse_product_ids, voucher_total


def _p(pid, shop, title, price, service=(), attrs=None, skus=None):
    return {
        "product_id": pid, "shop_id": shop, "title": title, "price": price, "service": list(service),
        "sold_count": int(price), "attributes": attrs or {}, "sku_options": skus or {},
        "short_description": "", "description": f"{title} description",
    }


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_products([
        _p("100", "s1", "hosport waist bag sports running belt", 459.0, ["freeShipping", "COD"], {"brand": ["hosport"]}),
        _p("101", "s1", "hosport waist bag sports running belt black", 470.0, ["COD"], {"brand": ["hosport"]}),
        _p("200", "s2", "running waist pouch unisex", 210.0, ["freeShipping"]),
        _p("201", "s1", "running waist pouch unisex", 215.0, ["official"]),
        _p("300", "s3", "Philips electric kettle 1.7l stainless", 1099.0, ["official"],
           {"capacity": ["1.7l"]}, {"1": {"color": "silver"}, "2": {"color": "black", "plug": "us"}}),
        _p("301", "s3", "Philips electric kettle 1.7l stainless", 999.0, [], {"capacity": ["1.7l"]},
           {"1": {"color": "silver"}}),
    ])


def product_problem(**reward) -> Problem:
    return Problem.from_dict({"query": "q", "category": "Product", "reward": {"product_id": "100", **reward}})


def test_exact_id_passes_without_rules(catalog):
    r = score_recommendation(product_problem(title=["something else entirely"]), ["100"], catalog)
    assert r.success and r.gt == 1.0 and r.items[0].exact


def test_rule_checks_pass_on_another_product(catalog):
    problem = product_problem(
        title=["hosport waist bag sports running belt"], attributes=[{"brand": ["hosport"]}],
        price=[{"between": [400, 480]}], service=["COD"],
    )
    r = score_recommendation(problem, ["101"], catalog)
    assert r.success and r.gt == 0.0 and r.items[0].hits == r.items[0].total == 4


@pytest.mark.parametrize("rule,failed", [
    ({"price": [{"less than": [None, 460]}]}, "price"),
    ({"price": [{"greater than": [480, None]}]}, "price"),
    ({"price": [{"between": [100, 200]}]}, "price"),
    ({"service": ["freeShipping"]}, "service"),
    ({"attributes": [{"brand": ["nike"]}]}, "attributes"),
    ({"title": ["stainless electric kettle"]}, "title"),
])
def test_each_rule_can_fail(catalog, rule, failed):
    r = score_recommendation(product_problem(**{"title": ["hosport waist bag sports running belt"], **rule}), ["101"], catalog)
    assert not r.success and r.reason == "item_mismatch"
    assert r.items[0].failed_rules == [failed]
    assert r.rule_score == pytest.approx(1 - 1 / r.items[0].total)


def test_price_bounds_inclusive(catalog):
    for rule in ({"less than": [None, 470]}, {"greater than": [470, None]}, {"between": [470, 470]}):
        item = score_recommendation(product_problem(price=[rule]), ["101"], catalog).items[0]
        assert item.passed, rule


def test_sku_pairs_use_the_best_sku(catalog):
    reward = {"product_id": "999", "title": ["Philips electric kettle 1.7l stainless"],
              "sku_options": [{"color": "black"}, {"plug": "us"}], "attributes": [{"capacity": ["1.7l"]}]}
    problem = Problem.from_dict({"query": "q", "category": "Product", "reward": reward})
    assert score_recommendation(problem, ["300"], catalog).success  # sku "2" has both pairs
    r = score_recommendation(problem, ["301"], catalog)  # only a silver sku
    assert not r.success and r.items[0].hits == 2 and r.items[0].total == 4  # title + capacity


def test_last_recommendation_wins_and_ids_are_cleaned(catalog):
    problem = product_problem(title=["x"])
    calls = [("recommend_product", {"product_ids": "100"}), ("find_product", {"q": "a"}),
             ("recommend_product", {"product_ids": "200"})]
    assert not score_trace_calls(problem, calls, catalog).success
    assert score_trace_calls(problem, calls[::-1], catalog).success
    assert parse_product_ids(" 100, 100 ,, 200 ") == ["100", "200"]
    assert score_trace_calls(problem, [("find_product", {"q": "a"})], catalog).reason == "no_recommendation"


def test_shop_requires_one_shop(catalog):
    reward = [{"product_id": "100", "title": ["hosport waist bag"]}, {"product_id": "201", "title": ["running waist pouch"]}]
    problem = Problem.from_dict({"query": "q", "category": "Shop", "reward": reward})
    assert score_recommendation(problem, ["100", "201"], catalog).success
    r = score_recommendation(problem, ["100", "200"], catalog)  # 200 is in s2; its title passes the rule
    assert r.items[1].passed and not r.success and r.reason == "not_one_shop"
    assert score_recommendation(problem, ["100"], catalog).reason == "too_few_products"


def voucher_problem(voucher, ids=("100", "200")):
    reward = [{"product_id": pid, "title": ["x"]} for pid in ids]
    return Problem.from_dict({"query": "q", "category": "Voucher", "reward": reward, "voucher": voucher})


def test_platform_fixed_voucher_from_the_sample(catalog):
    # 459 + 210 = 669 > 640; >= 600 threshold, 669 - 50 = 619 fits.
    v = {"voucher_type": "platform", "threshold": 600, "discount_type": "fixed", "face_value": 50, "budget": 640}
    assert score_recommendation(voucher_problem(v), ["100", "200"], catalog).success
    assert score_recommendation(voucher_problem({**v, "budget": 610}), ["100", "200"], catalog).reason == "over_budget"
    assert score_recommendation(voucher_problem({**v, "threshold": 700}), ["100", "200"], catalog).reason == "over_budget"
    assert score_recommendation(voucher_problem({**v, "budget": 700}), ["100", "200"], catalog).success  # fits directly


def test_percentage_voucher_with_cap():
    # 1000 at 20 % = 800, but the cap of 100 limits the discount: max(800, 900) = 900.
    v = {"voucher_type": "platform", "threshold": 500, "discount_type": "percentage", "discount": 0.2, "cap": 100}
    assert voucher_total([600.0, 400.0], ["a", "b"], v) == pytest.approx(900.0)
    assert voucher_total([600.0, 400.0], ["a", "b"], {**v, "cap": 300}) == pytest.approx(800.0)
    assert voucher_total([600.0, 400.0], ["a", "b"], {**v, "discount": 20, "cap": 300}) == pytest.approx(800.0)
    assert voucher_total([300.0, 100.0], ["a", "b"], v) is None  # below threshold


def test_shop_voucher_across_two_shops(catalog):
    # 459 + 215 = 674 (both in s1) -> 20 % capped at 100: max(539.2, 574) = 574 <= 600.
    v = {"voucher_type": "shop", "threshold": 600, "discount_type": "percentage", "discount": 0.2, "cap": 100, "budget": 600}
    assert score_recommendation(voucher_problem(v, ("100", "201")), ["100", "201"], catalog).success
    # 459 + 210 = 669 from shops s1 and s2: a shop voucher does not apply, 669 > 600.
    r = score_recommendation(voucher_problem(v), ["100", "200"], catalog)
    assert not r.success and r.reason == "over_budget"
    assert voucher_total([459.0, 210.0], ["s1", "s2"], v) is None


def ids(result):
    return [r["product_id"] for r in result.result]


def test_find_product_reads_arguments_as_the_server_does(catalog):
    box = Sandbox(catalog)
    ok = box.call("find_product", {"q": "waist bag", "page": 1})
    assert ok.ok and set(ids(ok)) == {"100", "101", "200", "201"}
    assert list(ok.result[0]) == ["product_id", "shop_id", "title", "price", "service", "sold_count"]
    assert ids(box.call("find_product", {"q": "waist", "sort": "priceasc"})) == ["200", "201", "100", "101"]  # page 1 by default
    assert ids(box.call("find_product", {"q": "waist", "page": "1", "price": "300-460"})) == ["100"]
    assert ids(box.call("find_product", {"q": "waist", "service": "freeShipping,COD"})) == ["100"]
    assert set(ids(box.call("find_product", {"q": "waist", "service": "freeShipping, COD"}))) == {"100", "200"}  # " COD" is no service
    assert ids(box.call("find_product", {"q": "waist", "service": "COD,default"})) == ids(box.call("find_product", {"q": "waist", "service": "COD"}))
    assert ids(box.call("find_product", {"q": "waist", "shop_id": "s2"})) == ["200"]
    assert ids(box.call("find_product", {"q": "kettle", "shop_id": 3})) == []  # a number is sent as text: "3" is not "s3"
    assert box.call("find_product", {"q": "waist", "page": 2}).result == []
    everything = set(ids(ok))
    for lenient in ({"price": "cheap"}, {"price": "abc-500x"}, {"sort": "random"}, {"service": "teleport"}, {"sort": "default"},
                    {"price": "1-2-3"}, {"shop_id": ""}):
        assert set(ids(box.call("find_product", {"q": "waist bag", **lenient}))) == everything, lenient
    for no_products in ({"page": 6}, {"page": 0}, {"page": True}, {"page": 1.0}, {"page": None}, {"page": " 1"}, {"page": "²"}):
        assert box.call("find_product", {"q": "waist", **no_products}).result == [], no_products
    assert box.call("find_product", {"q": "  "}).result == [] and ids(box.call("find_product", {"q": "waist", "page": [1, 3]}))
    for error in ({}, {"q": 7}, {"q": ["waist"]}, {"q": "waist", "color": "red"}):
        assert not box.call("find_product", error).ok, error
    assert not box.call("rm_rf", {}).ok and not box.call("find_product", ["q"]).ok
    # a list sends its first element as the query parameter; a numeric shop id is its text
    assert ids(box.call("find_product", {"q": "waist", "service": ["COD", "official"]})) == ids(
        box.call("find_product", {"q": "waist", "service": "COD"}))
    shops = Sandbox(Catalog.from_products([_p("1", "4908479", "red kettle", 10.0), _p("2", "77", "red kettle", 9.0)]))
    assert ids(shops.call("find_product", {"q": "kettle", "shop_id": 4908479})) == ["1"]


def test_find_product_sorts_the_best_fifty_by_relevance():
    """The server keeps the 50 most relevant products that pass the filters, then sorts them:
    a cheap but barely relevant product never comes first under priceasc."""
    products = [_p(str(i), "s", "red kettle " + "steel " * (i % 3) + f"model{i}", 100.0 + i) for i in range(60)]
    products.append(_p("cheap", "s", "red kettle " + "filler words " * 40, 1.0))  # long title: least relevant
    box = Sandbox(Catalog.from_products(products))
    pages = [ids(box.call("find_product", {"q": "red kettle", "page": n, "sort": "priceasc"})) for n in range(1, 7)]
    seen = [pid for page in pages for pid in page]
    assert len(seen) == 50 and "cheap" not in seen and pages[5] == []
    assert [float(box.catalog.products[pid]["price"]) for pid in seen] == sorted(box.catalog.products[pid]["price"] for pid in seen)


def test_view_product_information_returns_the_real_fields(catalog):
    box = Sandbox(catalog)
    view = box.call("view_product_information", {"product_ids": "300,nope,100"}).result
    assert [v["product_id"] for v in view] == ["300", "100"]  # unknown ids are skipped
    assert list(view[0]) == ["product_id", "short_description", "description", "sku_options", "attributes"]
    assert view[0]["sku_options"]["2"] == {"color": "black", "plug": "us"}
    assert box.call("view_product_information", {"product_ids": "300, 100"}).result[1:] == []  # " 100" is no id
    assert [v["product_id"] for v in box.call("view_product_information", {"product_ids": 300}).result] == ["300"]
    assert box.call("view_product_information", {"product_ids": ""}).result == []
    assert not box.call("view_product_information", {}).ok and not box.call("view_product_information", {"ids": "300"}).ok


def test_recommend_terminate_and_voucher_answers(catalog):
    box = Sandbox(catalog)
    assert box.call("recommend_product", {"product_ids": "100,200"}).result == "Having recommended the products to the user: 100,200."
    assert not box.call("recommend_product", {}).ok
    assert box.call("terminate", {}).result == "The interaction has been completed with status: success"
    assert box.call("calculate_voucher", {"product_ids": "100,200", "threshold": 600, "discount_type": "fixed", "face_value": 50}).result == {
        "subtotal": 669.0, "voucher_applies": True, "total_after_voucher": 619.0}
    # the reference agent's signature: prices as text, the percentage in percent, capped
    ref = box.call("calculate_voucher", {"product_prices": "459, 210", "voucher_type": "percentage", "discount_value": 20,
                                         "threshold": 600, "budget": 600, "cap": 100}).result
    assert ref == {"prices": [459.0, 210.0], "total_before": 669.0, "discount_amount": 100.0, "total_after": 569.0,
                   "within_budget": True, "voucher_applied": True, "budget": 600}
    assert "error" in box.call("calculate_voucher", {"product_prices": "459,x", "voucher_type": "fixed", "discount_value": 5,
                                                     "threshold": 1, "budget": 1}).result
    assert not box.call("calculate_voucher", {"product_prices": "459", "voucher_type": "fixed", "discount_value": "5",
                                              "threshold": 1, "budget": 1}).ok
    assert box.call("python_execute", {"code": "459 + 210 - 50"}).result == "619"


@pytest.mark.parametrize("code", ["__import__('os').system('true')", "9**9**9", "open('/etc/passwd')", "(1).__class__",
                                  "[x for x in range(10)]", "1" * 3000, "lambda: 1", "1/0"])
def test_python_execute_never_runs_code(code):
    with pytest.raises(UnsafeExpression):
        evaluate(code)


def test_catalog_roundtrip_is_deterministic(tmp_path, catalog):
    a = write_catalog(catalog, tmp_path / "a" / "documents.jsonl.gz")
    b = write_catalog(catalog, tmp_path / "b" / "documents.jsonl.gz")
    assert a.read_bytes() == b.read_bytes()
    again = load_catalog(tmp_path / "a")
    assert again.products == catalog.products


def test_real_shoppingbench_rewards_load(shared_dir):
    from shopdistill_assets.sandbox import load_suite

    counts = {name: len(load_suite(shared_dir / "data/shoppingbench" / f"synthesize_{name}_test.jsonl"))
              for name in ("product", "shop", "voucher")}
    assert counts == {"product": 250, "shop": 250, "voucher": 250}
    voucher = load_suite(shared_dir / "data/shoppingbench/synthesize_voucher_test.jsonl")
    assert all(p.category == "Voucher" and p.voucher for p in voucher)


# ---- scoring as ORO does (issue 18, section 4) ----------------------------------------------

def test_product_ids_as_a_list_or_a_number_recommend_nothing(catalog):
    problem = product_problem()
    for value in (["100"], 100, None, {"id": "100"}):
        r = score_trace_calls(problem, [("recommend_product", {"product_ids": value})], catalog)
        assert not r.success and r.recommended_ids == [] and r.reason == "product_ids_not_text", value
    assert score_trace_calls(problem, [("recommend_product", {"product_ids": "100"})], catalog).success


def test_a_last_recommendation_without_object_arguments_is_skipped(catalog):
    problem = product_problem()
    good = ("recommend_product", {"product_ids": "100"})
    for junk in ("200", ["200"], None, 200):
        r = score_trace_calls(problem, [good, ("recommend_product", junk)], catalog)
        assert r.success and r.recommended_ids == ["100"], junk  # the earlier one stands
    assert score_trace_calls(problem, [("recommend_product", "100")], catalog).reason == "no_recommendation"
    # an object without product_ids does count, and recommends nothing
    assert not score_trace_calls(problem, [good, ("recommend_product", {})], catalog).success


def test_category_is_compared_lower_cased(catalog):
    reward = [{"product_id": "100", "title": ["hosport waist bag"]}, {"product_id": "201", "title": ["running waist pouch"]}]
    for cat in ("Shop", "shop", "SHOP"):
        problem = Problem.from_dict({"query": "q", "category": cat, "reward": reward})
        r = score_recommendation(problem, ["100", "200"], catalog)
        assert (r.success, r.reason, r.components["shop"]) == (False, "not_one_shop", 0), cat
    v = {"voucher_type": "platform", "threshold": 600, "discount_type": "fixed", "face_value": 50, "budget": 610}
    problem = Problem.from_dict({"query": "q", "category": "voucher", "reward": reward, "voucher": v})
    assert score_recommendation(problem, ["100", "201"], catalog).reason == "over_budget"  # 674 - 50 > 610


def test_unknown_category_is_a_clear_failure(catalog):
    problem = Problem.from_dict({"query": "q", "category": "Bundle", "reward": {"product_id": "100"}})
    r = score_recommendation(problem, ["100"], catalog)
    assert (r.success, r.reason) == (False, "unsupported_category")


def test_budget_and_price_bounds_are_exact(catalog):
    # 459 + 210 = 669: a budget of 669 fits, 668.99 does not (ORO compares without tolerance)
    v = {"voucher_type": "platform", "threshold": 10_000, "discount_type": "fixed", "face_value": 50, "budget": 669}
    assert score_recommendation(voucher_problem(v), ["100", "200"], catalog).success
    assert not score_recommendation(voucher_problem({**v, "budget": 668.99}), ["100", "200"], catalog).success
    item = score_recommendation(product_problem(price=[{"less than": [None, 469.9999999]}]), ["101"], catalog).items[0]
    assert not item.passed
    broken = {**v, "budget": 600, "threshold": 100, "discount_type": "percentage", "discount": 0.5, "cap": None}
    assert score_recommendation(voucher_problem(broken), ["100", "200"], catalog).reason == "over_budget"


WEB_REWARD = {"product_id": "300", "title": "Philips electric kettle 1.7l stainless", "description": "",
              "price": 1099.0, "shop_id": "s3"}


def web_problem(key_attribute="stainless") -> Problem:
    return Problem.from_dict({"query": "Which metal ...? I want a kettle of it.", "Knowledge_Attribute": key_attribute,
                              "reward": WEB_REWARD})


def test_web_problems_get_shoppingbench_rule(catalog):
    problem = web_problem()
    assert problem.category == "Web" and problem.key_attribute == "stainless"
    exact = score_recommendation(problem, ["300"], catalog)
    assert exact.success and exact.components == {"gt": 1, "rule": 1.0, "kw": 1, "title": 1}
    alike = score_recommendation(problem, ["301"], catalog)  # same title, carries the attribute
    assert alike.success and alike.gt == 0.0
    other = score_recommendation(problem, ["100"], catalog)  # a title is never split into characters
    assert not other.success and other.items[0].failed_rules == ["key_attribute", "title"]
    assert not score_recommendation(web_problem("copper"), ["301"], catalog).success
    assert Problem.from_dict(problem.to_dict()) == problem


def test_suites_split_lines_on_newline_only(tmp_path):
    from shopdistill_assets.sandbox import load_suite

    path = tmp_path / "synthesize_web_simpleqa_test.jsonl"
    rows = [{"query": "a\u0085b\u2028c", "Knowledge_Attribute": "x", "reward": WEB_REWARD},
            {"query": "second", "Knowledge_Attribute": "y", "reward": WEB_REWARD}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    problems = load_suite(path)
    assert [p.query for p in problems] == ["a\u0085b\u2028c", "second"] and {p.category for p in problems} == {"Web"}


def test_the_real_shoppingbench_folder_loads(shared_dir):
    from shopdistill_assets.split.heldout import load_problems

    problems = load_problems(shared_dir / "data/shoppingbench")
    assert Counter(p.category for p in problems) == {"Product": 250, "Shop": 250, "Voucher": 250, "Web": 150}
    web = [p for p in problems if p.category == "Web"]
    assert all(p.key_attribute and isinstance(p.reward[0]["title"], str) for p in web)
    assert sum("\u0085" in json.dumps(p.to_dict(), ensure_ascii=False) for p in web) >= 1  # the line that broke it


def test_web_problems_survive_the_held_out_rows(catalog):
    """The held-out set stores a problem as its reward: the key attribute rides on the reward item."""
    from shopdistill_assets.split.heldout import problems_to_rows, rows_to_problems

    again = rows_to_problems(problems_to_rows([web_problem()]))[0]
    assert (again.category, again.key_attribute, again.reward) == ("Web", "stainless", web_problem().reward)
    assert score_recommendation(again, ["301"], catalog).success
    assert not score_recommendation(rows_to_problems(problems_to_rows([web_problem("copper")]))[0], ["301"], catalog).success
