"""One test per airline tool on the real τ-bench data, with hand-computed numbers.

Each expected value is derived by hand from the JSON records (the arithmetic is in
the comments), in both compatibility modes where they differ.
"""
from __future__ import annotations

import json

import pytest

from agentgrpo.envs.airline import AirlineDomain, load_tau_bench


@pytest.fixture(scope="module")
def domain(tau_bench_dir) -> AirlineDomain:
    return load_tau_bench(tau_bench_dir)


@pytest.fixture(scope="module")
def fixed(tau_bench_dir) -> AirlineDomain:
    return load_tau_bench(tau_bench_dir, compat="fixed")


def call(domain: AirlineDomain, state, name: str, **kwargs) -> str:
    return domain.execute(state, name, kwargs)


MIA_BOOKING = dict(
    user_id="mia_li_3668", origin="JFK", destination="SEA", flight_type="one_way",
    cabin="economy",
    flights=[{"flight_number": "HAT136", "date": "2024-05-20"},
             {"flight_number": "HAT039", "date": "2024-05-20"}],
    passengers=[{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"},
                {"first_name": "Amelia", "last_name": "Ahmed", "dob": "1957-03-21"}],
    total_baggages=5, nonfree_baggages=2, insurance="yes",
    # HAT136 economy 152 + HAT039 economy 103 = 255 per passenger; x2 passengers = 510;
    # insurance 2 x 30 = 60; 2 non-free bags x 50 = 100; total 510 + 60 + 100 = 670.
    payment_methods=[{"payment_id": "certificate_7504069", "amount": 250},
                     {"payment_id": "credit_card_4421486", "amount": 420}],
)


def test_book_reservation_prices_insurance_and_bags(domain):
    state = domain.new_state()
    reservation = json.loads(call(domain, state, "book_reservation", **MIA_BOOKING))
    assert reservation["reservation_id"] == "HATHAT"
    assert [f["price"] for f in reservation["flights"]] == [152, 103]
    assert reservation["flights"][1] == {"flight_number": "HAT039", "date": "2024-05-20", "price": 103,
                                         "origin": "ATL", "destination": "SEA"}
    assert reservation["payment_history"] == MIA_BOOKING["payment_methods"]
    assert reservation["created_at"] == "2024-05-15T15:00:00"
    assert "status" not in reservation
    user = state.get("users", "mia_li_3668")
    assert "certificate_7504069" not in user["payment_methods"]  # a used certificate is removed
    assert "certificate_4856383" in user["payment_methods"]
    assert user["reservations"][-1] == "HATHAT"
    # τ-bench quirk: seats are not decremented (economy seats 14 on HAT136).
    assert state.get("flights", "HAT136")["dates"]["2024-05-20"]["available_seats"]["economy"] == 14
    # The next bookings get the next ids.
    second = json.loads(call(domain, state, "book_reservation", **{
        **MIA_BOOKING, "passengers": MIA_BOOKING["passengers"][:1], "insurance": "no", "nonfree_baggages": 0,
        "payment_methods": [{"payment_id": "credit_card_1955700", "amount": 255}]}))
    assert second["reservation_id"] == "HATHAU"


def test_book_reservation_fixed_mode_decrements_seats(fixed):
    state = fixed.new_state()
    call(fixed, state, "book_reservation", **MIA_BOOKING)
    # 14 - 2 passengers = 12 on HAT136; 10 - 2 = 8 on HAT039 (economy, 2024-05-20).
    assert state.get("flights", "HAT136")["dates"]["2024-05-20"]["available_seats"]["economy"] == 12
    assert state.get("flights", "HAT039")["dates"]["2024-05-20"]["available_seats"]["economy"] == 8
    assert fixed.base.tables["flights"]["HAT136"]["dates"]["2024-05-20"]["available_seats"]["economy"] == 14


def test_book_reservation_fourth_booking(domain, fixed):
    """Ids HATHAT, HATHAU, HATHAV; τ-bench then overwrites HATHAV, fixed refuses."""
    one = {**MIA_BOOKING, "passengers": MIA_BOOKING["passengers"][:1], "insurance": "no",
           "nonfree_baggages": 0, "payment_methods": [{"payment_id": "credit_card_1955700", "amount": 255}]}
    for dom in (domain, fixed):
        state = dom.new_state()
        ids = [json.loads(call(dom, state, "book_reservation", **one))["reservation_id"] for _ in range(3)]
        assert ids == ["HATHAT", "HATHAU", "HATHAV"]
        fourth = call(dom, state, "book_reservation", **{**one, "flight_type": "round_trip"})
        if dom is fixed:
            assert fourth == "Error: too many reservations"
        else:
            assert json.loads(fourth)["reservation_id"] == "HATHAV"
            assert state.get("reservations", "HATHAV")["flight_type"] == "round_trip"
            assert state.get("users", "mia_li_3668")["reservations"][-4:] == [
                "HATHAT", "HATHAU", "HATHAV", "HATHAV"]


@pytest.mark.parametrize("change,error", [
    ({"user_id": "nobody_1"}, "Error: user not found"),
    ({"flights": [{"flight_number": "HAT999", "date": "2024-05-20"}]}, "Error: flight HAT999 not found"),
    ({"flights": [{"flight_number": "HAT136", "date": "2024-06-20"}]},
     "Error: flight HAT136 not found on date 2024-06-20"),
    ({"flights": [{"flight_number": "HAT001", "date": "2024-05-10"}]},  # landed that day
     "Error: flight HAT001 not available on date 2024-05-10"),
    ({"cabin": "business", "passengers": MIA_BOOKING["passengers"] * 2},  # 2 business seats, 4 people
     "Error: not enough seats on flight HAT136"),
    ({"payment_methods": [{"payment_id": "credit_card_0", "amount": 670}]},
     "Error: payment method credit_card_0 not found"),
    ({"payment_methods": [{"payment_id": "certificate_4856383", "amount": 250},  # holds only 100
                          {"payment_id": "credit_card_4421486", "amount": 420}]},
     "Error: not enough balance in payment method certificate_4856383"),
    ({"payment_methods": [{"payment_id": "credit_card_4421486", "amount": 669}]},
     "Error: payment amount does not add up, total price is 670, but paid 669"),
])
def test_book_reservation_errors_change_nothing(domain, change, error):
    state = domain.new_state()
    assert call(domain, state, "book_reservation", **{**MIA_BOOKING, **change}) == error
    assert state.num_touched == 0 and state.db_hash() == domain.new_state().db_hash()


def test_failure_after_a_partial_write_is_rolled_back(domain):
    # The same certificate twice: each share (125, 130) fits its 250 balance and they
    # sum to 255 (one economy passenger), so the checks pass; the first share deletes
    # the certificate and the second then fails. τ-bench would keep the deletion.
    state = domain.new_state()
    booking = {**MIA_BOOKING, "passengers": MIA_BOOKING["passengers"][:1], "insurance": "no",
               "nonfree_baggages": 0,
               "payment_methods": [{"payment_id": "certificate_7504069", "amount": 125},
                                   {"payment_id": "certificate_7504069", "amount": 130}]}
    assert call(domain, state, "book_reservation", **booking) == "Error: 'certificate_7504069'"
    assert "certificate_7504069" in state.get("users", "mia_li_3668")["payment_methods"]
    assert state.num_touched == 0


def test_cancel_reservation_appends_negative_refunds(domain):
    state = domain.new_state()
    # Z7GOZK paid 169 with gift_card_2200803; the refund entry is -169.
    reservation = json.loads(call(domain, state, "cancel_reservation", reservation_id="Z7GOZK"))
    assert reservation["payment_history"] == [{"payment_id": "gift_card_2200803", "amount": 169},
                                              {"payment_id": "gift_card_2200803", "amount": -169}]
    assert reservation["status"] == "cancelled"
    # Only the history records the refund: the gift card balance stays 123.
    assert state.get("users", "olivia_gonzalez_2305")["payment_methods"]["gift_card_2200803"]["amount"] == 123
    assert call(domain, state, "cancel_reservation", reservation_id="NOPE00") == "Error: reservation not found"


def test_update_reservation_flights_keeps_old_price_of_kept_segments(domain):
    state = domain.new_state()
    # 1N99U6 (economy, 2 passengers) flies HAT284 161 + HAT152 192 + HAT112 184 = 537 each,
    # 1074 in all. New itinerary: HAT266 on 05-19 (new, economy fare 146) + HAT112 on
    # 05-27 (kept at 184): 330 each, 660 in all. Difference 660 - 1074 = -414, a refund
    # to gift_card_5634230, whose balance goes 67 + 414 = 481.
    reservation = json.loads(call(domain, state, "update_reservation_flights",
                                  reservation_id="1N99U6", cabin="economy",
                                  flights=[{"flight_number": "HAT266", "date": "2024-05-19"},
                                           {"flight_number": "HAT112", "date": "2024-05-27"}],
                                  payment_id="gift_card_5634230"))
    assert [(f["flight_number"], f["price"]) for f in reservation["flights"]] == [("HAT266", 146), ("HAT112", 184)]
    assert reservation["payment_history"][-1] == {"payment_id": "gift_card_5634230", "amount": -414}
    assert state.get("users", "james_taylor_7043")["payment_methods"]["gift_card_5634230"]["amount"] == 481


@pytest.mark.parametrize("compat,cabin_after", [("tau_bench", "economy"), ("fixed", "business")])
def test_update_reservation_flights_cabin_change(tau_bench_dir, domain, fixed, compat, cabin_after):
    dom = domain if compat == "tau_bench" else fixed
    state = dom.new_state()
    # YAX4DR (2 passengers) to business on the same flights: no segment is kept (the
    # cabin differs), so both are re-priced: (350 + 499) x 2 = 1698; paid before
    # (122 + 127) x 2 = 498; charge 1698 - 498 = 1200.
    reservation = json.loads(call(dom, state, "update_reservation_flights", reservation_id="YAX4DR",
                                  cabin="business",
                                  flights=[{"flight_number": "HAT235", "date": "2024-05-18"},
                                           {"flight_number": "HAT298", "date": "2024-05-19"}],
                                  payment_id="credit_card_4938634"))
    assert [f["price"] for f in reservation["flights"]] == [350, 499]
    assert reservation["payment_history"][-1] == {"payment_id": "credit_card_4938634", "amount": 1200}
    assert reservation["cabin"] == cabin_after  # τ-bench forgets to update the cabin


def test_update_reservation_flights_errors(domain):
    state = domain.new_state()
    new = [{"flight_number": "HAT266", "date": "2024-05-19"}, {"flight_number": "HAT112", "date": "2024-05-27"}]
    assert call(domain, state, "update_reservation_flights", reservation_id="NOPE00", cabin="economy",
                flights=new, payment_id="gift_card_5634230") == "Error: reservation not found"
    assert call(domain, state, "update_reservation_flights", reservation_id="1N99U6", cabin="economy",
                flights=new, payment_id="certificate_9380982") == (
        "Error: certificate cannot be used to update reservation")
    assert call(domain, state, "update_reservation_flights", reservation_id="1N99U6", cabin="economy",
                flights=new, payment_id="credit_card_1") == "Error: payment method not found"
    # Business on HAT112 (05-27) has 0 seats for 2 passengers.
    assert call(domain, state, "update_reservation_flights", reservation_id="1N99U6", cabin="business",
                flights=new, payment_id="gift_card_5634230") == "Error: not enough seats on flight HAT112"
    # Keeping the three old flights and adding HAT266 costs 146 x 2 = 292 > balance 67.
    old = [{"flight_number": f, "date": d} for f, d in
           [("HAT284", "2024-05-19"), ("HAT152", "2024-05-19"), ("HAT112", "2024-05-27")]]
    assert call(domain, state, "update_reservation_flights", reservation_id="1N99U6", cabin="economy",
                flights=old + new[:1], payment_id="gift_card_5634230") == "Error: gift card balance is not enough"
    assert state.num_touched == 0
    # Keeping everything as it is costs 0: no payment entry is added.
    reservation = json.loads(call(domain, state, "update_reservation_flights", reservation_id="1N99U6",
                                  cabin="economy", flights=old, payment_id="gift_card_5634230"))
    assert reservation["payment_history"] == domain.data["reservations"]["1N99U6"]["payment_history"]



def test_update_reservation_flights_extra_fields_tau_bench_accepts_fixed_rejects(domain, fixed):
    """Agents often copy origin/destination into the flight entries. τ-bench reads only
    flight_number and date, then overwrites price/origin/destination on its copy of the
    caller's dict: the database ends exactly as without the extra keys."""
    plain = [{"flight_number": "HAT266", "date": "2024-05-19"}, {"flight_number": "HAT112", "date": "2024-05-27"}]
    # HAT266 is new (LAS -> IAH), HAT112 on 05-27 is kept (IAH -> LAS); a wrong origin is overwritten too
    extra = [{"flight_number": "HAT266", "date": "2024-05-19", "origin": "LAS", "destination": "IAH"},
             {"flight_number": "HAT112", "date": "2024-05-27", "origin": "XXX", "destination": "LAS"}]
    args = dict(reservation_id="1N99U6", cabin="economy", payment_id="gift_card_5634230")
    with_plain, with_extra = domain.new_state(), domain.new_state()
    expected = json.loads(call(domain, with_plain, "update_reservation_flights", flights=plain, **args))
    reservation = json.loads(call(domain, with_extra, "update_reservation_flights", flights=extra, **args))
    assert reservation == expected
    assert with_extra.db_hash() == with_plain.db_hash() != domain.new_state().db_hash()
    # τ-bench's key order: the caller's keys, then price
    assert list(reservation["flights"][0]) == ["flight_number", "date", "origin", "destination", "price"]
    assert reservation["flights"][1] == {"flight_number": "HAT112", "date": "2024-05-27", "origin": "IAH",
                                         "destination": "LAS", "price": 184}
    state = fixed.new_state()
    assert call(fixed, state, "update_reservation_flights", flights=extra, **args) == (
        "Error: invalid arguments for update_reservation_flights: argument 'flights[0]' has an unexpected "
        "field 'origin'")
    assert state.num_touched == 0


def test_book_reservation_stores_extra_fields_as_tau_bench(domain, fixed):
    """τ-bench stores the caller's flight, passenger and payment dicts: extra keys that it
    does not overwrite stay in the reservation (and so change the database hash)."""
    flights = [{**ref, "origin": "JFK", "destination": "ATL"} if i == 0 else ref
               for i, ref in enumerate(MIA_BOOKING["flights"])]
    plain, same = domain.new_state(), domain.new_state()
    call(domain, plain, "book_reservation", **MIA_BOOKING)
    call(domain, same, "book_reservation", **{**MIA_BOOKING, "flights": flights})
    assert same.db_hash() == plain.db_hash()
    passengers = [{**MIA_BOOKING["passengers"][0], "gender": "female"}, MIA_BOOKING["passengers"][1]]
    payments = [{**MIA_BOOKING["payment_methods"][0], "note": "certificate"}, MIA_BOOKING["payment_methods"][1]]
    state = domain.new_state()
    reservation = json.loads(call(domain, state, "book_reservation",
                                  **{**MIA_BOOKING, "passengers": passengers, "payment_methods": payments}))
    assert reservation["passengers"] == passengers and reservation["payment_history"] == payments
    assert state.db_hash() != plain.db_hash()
    assert call(fixed, fixed.new_state(), "book_reservation", **{**MIA_BOOKING, "passengers": passengers}) == (
        "Error: invalid arguments for book_reservation: argument 'passengers[0]' has an unexpected field "
        "'gender'")

def test_update_reservation_baggages(domain):
    state = domain.new_state()
    # YAX4DR has 0 non-free bags; 2 more non-free bags cost 2 x 50 = 100.
    reservation = json.loads(call(domain, state, "update_reservation_baggages", reservation_id="YAX4DR",
                                  total_baggages=3, nonfree_baggages=2, payment_id="credit_card_4938634"))
    assert (reservation["total_baggages"], reservation["nonfree_baggages"]) == (3, 2)
    assert reservation["payment_history"][-1] == {"payment_id": "credit_card_4938634", "amount": 100}
    # Back down to 1 non-free bag: charge max(0, 1 - 2) x 50 = 0, no payment entry.
    reservation = json.loads(call(domain, state, "update_reservation_baggages", reservation_id="YAX4DR",
                                  total_baggages=3, nonfree_baggages=1, payment_id="credit_card_4938634"))
    assert len(reservation["payment_history"]) == 2
    assert call(domain, state, "update_reservation_baggages", reservation_id="YAX4DR", total_baggages=4,
                nonfree_baggages=2, payment_id="certificate_6730850") == (
        "Error: certificate cannot be used to update reservation")
    # 1N99U6: 2 non-free bags cost 100 > gift card balance 67.
    assert call(domain, state, "update_reservation_baggages", reservation_id="1N99U6", total_baggages=2,
                nonfree_baggages=2, payment_id="gift_card_5634230") == "Error: gift card balance is not enough"


def test_update_reservation_passengers(domain):
    state = domain.new_state()
    people = [{"first_name": "Chen", "last_name": "Lee", "dob": "1967-12-12"},
              {"first_name": "Mei", "last_name": "Lee", "dob": "1970-02-02"}]
    reservation = json.loads(call(domain, state, "update_reservation_passengers",
                                  reservation_id="YAX4DR", passengers=people))
    assert reservation["passengers"] == people
    assert call(domain, state, "update_reservation_passengers", reservation_id="YAX4DR",
                passengers=people[:1]) == "Error: number of passengers does not match"


def test_send_certificate_ids_in_order(domain, fixed):
    for dom, last in [(domain, "None"), (fixed, "Error: too many certificates")]:
        state = dom.new_state()
        for suffix in ("322", "323", "324"):
            assert call(dom, state, "send_certificate", user_id="ethan_martin_2396", amount=150) == (
                f"Certificate certificate_3221{suffix} added to user ethan_martin_2396 with amount 150.")
        methods = state.get("users", "ethan_martin_2396")["payment_methods"]
        assert methods["certificate_3221323"] == {"source": "certificate", "amount": 150, "id": "certificate_3221323"}
        assert call(dom, state, "send_certificate", user_id="ethan_martin_2396", amount=150) == last
    assert call(domain, domain.new_state(), "send_certificate", user_id="x", amount=5) == "Error: user not found"


def test_get_user_and_reservation_details(domain, fixed):
    state = domain.new_state()
    assert json.loads(call(domain, state, "get_user_details", user_id="mia_li_3668")) == (
        domain.data["users"]["mia_li_3668"])
    assert call(domain, state, "get_reservation_details", reservation_id="YAX4DR") == json.dumps(
        domain.data["reservations"]["YAX4DR"])
    assert call(domain, state, "get_user_details", user_id="nobody_1") == "Error: user not found"
    # τ-bench's not-found message for reservations says "user"; fixed says "reservation".
    assert call(domain, state, "get_reservation_details", reservation_id="NOPE00") == "Error: user not found"
    assert call(fixed, state, "get_reservation_details", reservation_id="NOPE00") == "Error: reservation not found"


def test_list_all_airports(domain):
    airports = json.loads(call(domain, domain.new_state(), "list_all_airports"))
    assert len(airports) == 20 and airports["LGA"] == "LaGuardia" and list(airports)[0] == "SFO"


def test_search_direct_flight(domain):
    results = json.loads(call(domain, domain.new_state(), "search_direct_flight",
                              origin="JFK", destination="ATL", date="2024-05-20"))
    assert [r["flight_number"] for r in results] == ["HAT057", "HAT136", "HAT218", "HAT268"]
    hat136 = results[1]
    assert "dates" not in hat136 and hat136["status"] == "available"
    assert hat136["prices"] == {"basic_economy": 52, "economy": 152, "business": 277}
    # Past dates are not bookable: HAT001 landed on 2024-05-10.
    assert json.loads(call(domain, domain.new_state(), "search_direct_flight",
                           origin="PHL", destination="LGA", date="2024-05-10")) == []


def test_search_onestop_flight_across_midnight(domain, fixed):
    for dom in (domain, fixed):
        results = json.loads(call(dom, dom.new_state(), "search_onestop_flight",
                                  origin="ATL", destination="SFO", date="2024-05-20"))
        pairs = {(a["flight_number"], b["flight_number"]): (a, b) for a, b in results}
        # HAT039 ATL->SEA leaves 22:00 and lands 03:00+1, so HAT011 SEA->SFO (13:00)
        # is taken the next day, 2024-05-21.
        first, second = pairs[("HAT039", "HAT011")]
        assert (first["date"], second["date"]) == ("2024-05-20", "2024-05-21")
        assert second["scheduled_departure_time_est"] == "13:00:00"
        # τ-bench shows leg 2's seats/prices of 05-20 (leg 1's date); fixed shows 05-21's.
        shown_day = "2024-05-20" if dom is domain else "2024-05-21"
        assert second["prices"] == dom.data["flights"]["HAT011"]["dates"][shown_day]["prices"]
        # A connection leaving before the first leg lands is excluded.
        assert all(a["scheduled_arrival_time_est"] <= b["scheduled_departure_time_est"] for a, b in results)
    # τ-bench computes the next date without zero padding; a bad date string then fails.
    assert call(domain, domain.new_state(), "search_onestop_flight",
                origin="ATL", destination="SFO", date="2024-05-xx").startswith("Error: invalid literal")


def test_search_onestop_next_day_padding_quirk():
    """τ-bench writes the next day of 2024-05-05 as '2024-05-6' and finds nothing."""
    day = {"status": "available", "available_seats": {"basic_economy": 5, "economy": 5, "business": 5},
           "prices": {"basic_economy": 10, "economy": 20, "business": 30}}
    dates = {"2024-05-05": day, "2024-05-06": day}
    data = {"users": {}, "reservations": {}, "flights": {
        "HAT900": {"flight_number": "HAT900", "origin": "AAA", "destination": "BBB",
                   "scheduled_departure_time_est": "23:00:00", "scheduled_arrival_time_est": "01:00:00+1",
                   "dates": dates},
        "HAT901": {"flight_number": "HAT901", "origin": "BBB", "destination": "CCC",
                   "scheduled_departure_time_est": "08:00:00", "scheduled_arrival_time_est": "09:00:00",
                   "dates": dates}}}
    query = {"origin": "AAA", "destination": "CCC", "date": "2024-05-05"}
    quirky, fixed = AirlineDomain(data, [], ""), AirlineDomain(data, [], "", "fixed")
    assert quirky.execute(quirky.new_state(), "search_onestop_flight", query) == "[]"
    results = json.loads(fixed.execute(fixed.new_state(), "search_onestop_flight", query))
    assert [(a["date"], b["date"]) for a, b in results] == [("2024-05-05", "2024-05-06")]


def test_calculate(domain):
    state = domain.new_state()
    # Task 14's expression: 2 * (228 + 372) = 1200 -> "1200.0".
    assert call(domain, state, "calculate", expression="2 * ((350 - 122) + (499 - 127))") == "1200.0"
    assert call(domain, state, "calculate", expression="10 / 3") == "3.33"
    assert call(domain, state, "calculate", expression="-(1.5 + .5) * -2") == "4.0"
    assert call(domain, state, "calculate", expression="2 ^ 3") == "Error: invalid characters in expression"
    assert call(domain, state, "calculate", expression="1 / 0") == "Error: division by zero"
    assert call(domain, state, "calculate", expression="(1 + 2").startswith("Error: ")


def test_think_and_transfer(domain):
    state = domain.new_state()
    assert call(domain, state, "think", thought="the user is gold, 3 free bags") == ""
    assert call(domain, state, "transfer_to_human_agents", summary="wants a refund") == "Transfer successful"
    assert state.num_touched == 0
