"""OnlineStore tools: a web shop's catalog and stock, shopper accounts, carts and promo codes,
checkout into orders, cancellations, returns with refunds, gift cards and product reviews.
Money is EUR rounded to 2 decimals; prices are net of VAT (see ``state.py``).

Every write raises :class:`ToolError` before it mutates anything; a write that succeeds always
changes the state.  The clock is ``state.now`` (never the wall clock); ids come from counters.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gym_envfactory import ToolError, tool

from .state import (
    Address,
    Allocation,
    Cart,
    CartLine,
    Customer,
    OnlineStoreDB,
    Order,
    OrderLine,
    OrderStatus,
    ProductCategory,
    PromoCode,
    ReturnLine,
    ReturnReason,
    ReturnRequest,
    Review,
    Variant,
)

# ----------------------------------------------------------------------------- result models


class ProductHit(BaseModel):
    product_id: str
    name: str
    brand: str
    category: str
    price_from: float
    price_to: float
    colours: list[str]
    sizes: list[str]
    in_stock: bool
    average_rating: float | None
    review_count: int


class ProductSearchResult(BaseModel):
    total_matches: int
    returned: int
    products: list[ProductHit]


class VariantInfo(BaseModel):
    variant_id: str
    colour: str
    size: str
    price: float
    available: int
    stock_by_warehouse: dict[str, int]


class ProductDetails(BaseModel):
    product_id: str
    name: str
    brand: str
    category: str
    description: str
    final_sale: bool
    active: bool
    average_rating: float | None
    review_count: int
    variants: list[VariantInfo]


class ReviewList(BaseModel):
    product_id: str
    product_name: str
    average_rating: float | None
    review_count: int
    reviews: list[Review]


class CartLineView(BaseModel):
    variant_id: str
    product_name: str
    colour: str
    size: str
    unit_price: float
    quantity: int
    line_total: float
    discount: float
    available: int


class CartView(BaseModel):
    customer_id: str
    lines: list[CartLineView]
    promo_code: str | None
    promo_note: str | None
    subtotal: float
    discount: float
    shipping: float
    vat_rate: float
    tax: float
    total: float
    priced_for_address_id: str | None
    shipping_speed: str


class OrderSummary(BaseModel):
    order_id: str
    status: str
    placed_at: str
    delivered_at: str | None
    total: float
    items: list[str]


class OrderDetails(Order):
    cancellable: bool
    return_deadline: date | None


class CancellationResult(BaseModel):
    order_id: str
    status: str
    refunded_to_payment_method: float
    refunded_to_store_credit: float
    store_credit_balance: float


class ReturnItem(BaseModel):
    variant_id: str = Field(description="Variant id from the order, e.g. P-104-NAVY-M")
    quantity: int = Field(ge=1, description="Units to send back")


class GiftCardRedemption(BaseModel):
    code: str
    amount_added: float
    store_credit_balance: float


# ----------------------------------------------------------------------------- helpers

_POSTAL_RE = {
    "DE": re.compile(r"^\d{5}$"), "FR": re.compile(r"^\d{5}$"), "IT": re.compile(r"^\d{5}$"),
    "AT": re.compile(r"^\d{4}$"), "BE": re.compile(r"^\d{4}$"), "NL": re.compile(r"^\d{4} ?[A-Z]{2}$"),
}

CustomerId = Annotated[str, Field(description="Customer id, e.g. C-1001 (see find_shopper_account)")]
VariantId = Annotated[str, Field(description="Variant id (product, colour, size), e.g. P-104-NAVY-M (see get_product_details)")]
OrderId = Annotated[str, Field(description="Order id, e.g. ORD-10001 (see list_store_orders)")]


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _today(state: OnlineStoreDB) -> date:
    return state.now.date()


def _customer(state: OnlineStoreDB, customer_id: str) -> Customer:
    c = state.customers.get(customer_id)
    if c is None:
        raise ToolError(f"No customer {customer_id}; customer ids look like C-1001 (use find_shopper_account "
                        "with the shopper's email)", code="not_found")
    return c


def _variant(state: OnlineStoreDB, variant_id: str) -> Variant:
    v = state.variants.get(variant_id)
    if v is None:
        raise ToolError(f"No variant {variant_id}; variant ids look like P-104-NAVY-M (use get_product_details "
                        "to see a product's sizes and colours)", code="not_found")
    return v


def _order(state: OnlineStoreDB, order_id: str) -> Order:
    o = state.orders.get(order_id)
    if o is None:
        raise ToolError(f"No order {order_id}; order ids look like ORD-10001 (use list_store_orders)",
                        code="not_found")
    return o


def _available(v: Variant) -> int:
    return sum(v.stock.values())


def _cart(state: OnlineStoreDB, customer_id: str) -> Cart:
    return state.carts.get(customer_id) or Cart(customer_id=customer_id)


def _address(c: Customer, address_id: str) -> Address:
    a = c.addresses.get(address_id)
    if a is None:
        known = ", ".join(c.addresses) or "none"
        raise ToolError(f"{c.customer_id} has no address {address_id}; saved addresses: {known}", code="not_found")
    return a


def _rating(state: OnlineStoreDB, product_id: str) -> tuple[float | None, int]:
    rs = [r.rating for r in state.reviews.values() if r.product_id == product_id]
    return (round(sum(rs) / len(rs), 1) if rs else None), len(rs)


def _has_prior_orders(state: OnlineStoreDB, customer_id: str) -> bool:
    return any(o.customer_id == customer_id and o.status != "cancelled" for o in state.orders.values())


class _Priced(BaseModel):
    line_totals: list[float]
    line_discounts: list[float]
    subtotal: float
    discount: float
    shipping: float
    vat_rate: float
    tax: float
    total: float


def _promo_problem(state: OnlineStoreDB, customer_id: str, promo: PromoCode, lines: list[CartLine]) -> ToolError | None:
    """The reason ``promo`` cannot apply to these cart lines now, as a ToolError, or None."""
    if promo.valid_until < _today(state):
        return ToolError(f"Promo code {promo.code} expired on {promo.valid_until}", code="promo_expired")
    if promo.first_order_only and _has_prior_orders(state, customer_id):
        return ToolError(f"{promo.code} is only valid on a customer's first order", code="promo_not_eligible")
    subtotal = 0.0
    eligible = 0.0
    for line in lines:
        v = state.variants[line.variant_id]
        amount = v.price * line.quantity
        subtotal += amount
        if promo.category is None or state.products[v.product_id].category == promo.category:
            eligible += amount
    if promo.category is not None and eligible <= 0:
        return ToolError(f"{promo.code} only applies to {promo.category} items and the cart has none",
                         code="promo_not_eligible")
    if subtotal + 1e-9 < promo.min_subtotal:
        return ToolError(f"{promo.code} needs a cart subtotal of at least {promo.min_subtotal:.2f} EUR "
                         f"(the cart is at {subtotal:.2f})", code="promo_not_eligible")
    return None


def _price(state: OnlineStoreDB, lines: list[CartLine], promo: PromoCode | None, country: str | None,
           speed: str) -> _Priced:
    """Price cart lines: per-line discounts from the promo, shipping, VAT of the destination country."""
    totals = [_money(state.variants[x.variant_id].price * x.quantity) for x in lines]
    discounts = [0.0] * len(lines)
    subtotal = _money(sum(totals))
    if promo is not None and promo.kind == "percent":
        for i, x in enumerate(lines):
            cat = state.products[state.variants[x.variant_id].product_id].category
            if promo.category is None or cat == promo.category:
                discounts[i] = _money(totals[i] * promo.value / 100)
    elif promo is not None and promo.kind == "fixed" and subtotal > 0:
        off = min(promo.value, subtotal)
        for i in range(len(lines) - 1):
            discounts[i] = _money(off * totals[i] / subtotal)
        discounts[-1] = _money(off - sum(discounts[:-1]))
    discount = _money(sum(discounts))
    goods = _money(subtotal - discount)
    if not lines:
        shipping = 0.0
    elif speed == "express":
        shipping = state.express_shipping
    elif (promo is not None and promo.kind == "free_shipping") or goods >= state.free_shipping_threshold - 1e-9:
        shipping = 0.0
    else:
        shipping = state.standard_shipping
    rate = state.vat_rates.get(country or "", 0.0)
    tax = _money((goods + shipping) * rate)
    return _Priced(line_totals=totals, line_discounts=discounts, subtotal=subtotal, discount=discount,
                   shipping=shipping, vat_rate=rate, tax=tax, total=_money(goods + shipping + tax))


def _cart_view(state: OnlineStoreDB, customer: Customer, address_id: str | None = None,
               speed: str = "standard") -> CartView:
    cart = _cart(state, customer.customer_id)
    if address_id is None and customer.addresses:
        address_id = next(iter(customer.addresses))
    country = _address(customer, address_id).country if address_id is not None else None
    promo = state.promo_codes.get(cart.promo_code) if cart.promo_code else None
    note = None
    if promo is not None:
        problem = _promo_problem(state, customer.customer_id, promo, cart.lines)
        if problem is not None:
            note = f"not applied: {problem}"
            promo = None
        else:
            note = promo.description
    p = _price(state, cart.lines, promo, country, speed)
    views = []
    for i, x in enumerate(cart.lines):
        v = state.variants[x.variant_id]
        views.append(CartLineView(variant_id=v.variant_id, product_name=state.products[v.product_id].name,
                                  colour=v.colour, size=v.size, unit_price=v.price, quantity=x.quantity,
                                  line_total=p.line_totals[i], discount=p.line_discounts[i], available=_available(v)))
    return CartView(customer_id=customer.customer_id, lines=views, promo_code=cart.promo_code, promo_note=note,
                    subtotal=p.subtotal, discount=p.discount, shipping=p.shipping, vat_rate=p.vat_rate, tax=p.tax,
                    total=p.total, priced_for_address_id=address_id, shipping_speed=speed)


def _check_line_quantity(state: OnlineStoreDB, v: Variant, quantity: int) -> None:
    if quantity > state.max_quantity_per_line:
        raise ToolError(f"At most {state.max_quantity_per_line} units of one variant per order "
                        f"(asked for {quantity} of {v.variant_id})", code="limit_exceeded")
    if quantity > _available(v):
        raise ToolError(f"Only {_available(v)} of {v.variant_id} in stock (asked for {quantity})",
                        code="out_of_stock")


def _line_refund(state: OnlineStoreDB, o: Order, line: OrderLine, quantity: int) -> float:
    """Refund for returning ``quantity`` more units of ``line``: what was paid for all units returned
    so far (these included), rounded, minus what the line's earlier returns already refunded; so the
    cumulative refund of a line never exceeds what was paid for it, however the return is split."""
    n = line.returned_quantity + quantity
    paid = _money((line.unit_price * n - line.discount * n / line.quantity) * (1 + o.vat_rate))
    before = sum(x.refund for rid in o.return_ids if rid in state.returns
                 for x in state.returns[rid].lines if x.variant_id == line.variant_id)
    return _money(max(0.0, paid - before))


def _return_deadline(state: OnlineStoreDB, o: Order) -> date | None:
    if o.delivered_at is None:
        return None
    return o.delivered_at.date() + timedelta(days=state.return_window_days)


# ----------------------------------------------------------------------------- catalog


@tool(read_only=True)
def search_products(
    state: OnlineStoreDB,
    *,
    query: Annotated[str | None, Field(description="Case-insensitive words that must all appear in the name, brand or description")] = None,
    category: Annotated[ProductCategory | None, Field(description="Only this category")] = None,
    max_price: Annotated[float | None, Field(description="Only products with a variant at or below this net price in EUR")] = None,
    colour: Annotated[str | None, Field(description="Only products offered in this colour, e.g. navy")] = None,
    size: Annotated[str | None, Field(description="Only products offered in this size, e.g. M or 42")] = None,
    in_stock_only: Annotated[bool, Field(description="Only products with at least one variant in stock (matching colour/size if given)")] = False,
    limit: Annotated[int, Field(ge=1, le=50, description="Maximum number of products returned (1-50)")] = 20,
) -> ProductSearchResult:
    """Search the store's catalog (discontinued products are never listed), sorted by name.

    Returns total_matches, returned and for each product: product_id, name, brand, category, price_from /
    price_to (net EUR over its variants), colours, sizes, in_stock, average_rating and review_count.
    Use get_product_details for the variant ids needed to add to a cart.
    Errors: invalid_amount (max_price not greater than 0), invalid_argument (no filter at all given).
    """
    if max_price is not None and max_price <= 0:
        raise ToolError(f"max_price must be greater than 0, got {max_price}", code="invalid_amount")
    if not any([query and query.strip(), category, max_price, colour, size]):
        raise ToolError("Give at least one of query, category, max_price, colour or size", code="invalid_argument")
    words = query.lower().split() if query else []
    hits = []
    for p in state.products.values():
        if not p.active or (category and p.category != category):
            continue
        text = f"{p.name} {p.brand} {p.description}".lower()
        if any(w not in text for w in words):
            continue
        vs = [v for v in state.variants.values() if v.product_id == p.product_id]
        match = [v for v in vs if (colour is None or v.colour.lower() == colour.lower().strip())
                 and (size is None or v.size.lower() == size.lower().strip())]
        if not match:
            continue
        if max_price is not None and min(v.price for v in match) > max_price + 1e-9:
            continue
        in_stock = any(_available(v) > 0 for v in match)
        if in_stock_only and not in_stock:
            continue
        avg, n = _rating(state, p.product_id)
        hits.append(ProductHit(
            product_id=p.product_id, name=p.name, brand=p.brand, category=p.category,
            price_from=min(v.price for v in vs), price_to=max(v.price for v in vs),
            colours=sorted({v.colour for v in vs}), sizes=list(dict.fromkeys(v.size for v in vs)),
            in_stock=in_stock, average_rating=avg, review_count=n))
    hits.sort(key=lambda h: (h.name, h.product_id))
    return ProductSearchResult(total_matches=len(hits), returned=min(limit, len(hits)), products=hits[:limit])


@tool(read_only=True)
def get_product_details(
    state: OnlineStoreDB,
    *,
    product_id: Annotated[str, Field(description="Product id, e.g. P-104 (see search_products)")],
) -> ProductDetails:
    """Get one product with all its variants.

    Returns name, brand, category, description, final_sale (final-sale items cannot be returned),
    active (false = discontinued), average_rating, review_count and every variant: variant_id, colour,
    size, net price in EUR, available units and stock per warehouse.
    Errors: not_found (unknown product_id).
    """
    p = state.products.get(product_id)
    if p is None:
        raise ToolError(f"No product {product_id}; product ids look like P-104 (use search_products)", code="not_found")
    avg, n = _rating(state, product_id)
    vs = [VariantInfo(variant_id=v.variant_id, colour=v.colour, size=v.size, price=v.price, available=_available(v),
                      stock_by_warehouse=dict(v.stock))
          for v in state.variants.values() if v.product_id == product_id]
    return ProductDetails(product_id=p.product_id, name=p.name, brand=p.brand, category=p.category,
                          description=p.description, final_sale=p.final_sale, active=p.active,
                          average_rating=avg, review_count=n, variants=vs)


@tool(read_only=True)
def list_product_reviews(
    state: OnlineStoreDB,
    *,
    product_id: Annotated[str, Field(description="Product id, e.g. P-104")],
    min_rating: Annotated[int | None, Field(ge=1, le=5, description="Only reviews with at least this many stars (1-5)")] = None,
) -> ReviewList:
    """List a product's reviews, newest first, with its average rating (over all reviews) and count.

    Each review: review_id, customer_id, rating (1-5 stars), title, body, verified_purchase, created_at.
    Errors: not_found (unknown product_id).
    """
    p = state.products.get(product_id)
    if p is None:
        raise ToolError(f"No product {product_id}; product ids look like P-104 (use search_products)", code="not_found")
    avg, n = _rating(state, product_id)
    rs = [r for r in state.reviews.values() if r.product_id == product_id and (min_rating is None or r.rating >= min_rating)]
    rs.sort(key=lambda r: (r.created_at, r.review_id), reverse=True)
    return ReviewList(product_id=product_id, product_name=p.name, average_rating=avg, review_count=n, reviews=rs)


# ----------------------------------------------------------------------------- accounts


@tool(read_only=True)
def find_shopper_account(
    state: OnlineStoreDB,
    *,
    email: Annotated[str, Field(description="The shopper's e-mail address (case-insensitive)")],
) -> Customer:
    """Find a shopper's store account by e-mail.

    Returns customer_id (needed by the cart, order and review tools), name, email, saved addresses
    (address_id, label, recipient, street, city, postal_code, country), stored payment methods
    (payment_method_id, kind card/paypal, brand, last4, expiry YYYY-MM) and store_credit (EUR, from
    gift cards and refunds).
    Errors: not_found (no account with that e-mail).
    """
    needle = email.strip().lower()
    for c in state.customers.values():
        if c.email.lower() == needle:
            return c
    raise ToolError(f"No store account with e-mail {email}; check the spelling with the shopper", code="not_found")


@tool
def add_shipping_address(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    label: Annotated[str, Field(description="Short name for the address, e.g. Home, Office")],
    street: Annotated[str, Field(description="Street and house number")],
    city: Annotated[str, Field(description="City")],
    postal_code: Annotated[str, Field(description="Postal code in the country's format (DE/FR/IT 5 digits, AT/BE 4 digits, NL '1234 AB')")],
    country: Annotated[str, Field(description="Two-letter country code: DE, AT, FR, NL, IT or BE")],
    recipient: Annotated[str | None, Field(description="Name on the parcel; defaults to the account holder")] = None,
) -> Address:
    """Save a new shipping address on a shopper's account. Returns it with its new address_id (AD-xxxx).

    Errors: not_found (unknown customer), unsupported_country (the store ships to DE, AT, FR, NL, IT and BE
    only), invalid_postal_code (wrong format for the country), invalid_argument (empty street, city or
    label), already_exists (the same street and postal code is already saved).
    """
    c = _customer(state, customer_id)
    cc = country.strip().upper()
    if cc not in state.vat_rates:
        raise ToolError(f"The store does not ship to {country}; it ships to {', '.join(sorted(state.vat_rates))}",
                        code="unsupported_country")
    pc = postal_code.strip().upper()
    if not _POSTAL_RE[cc].match(pc):
        raise ToolError(f"{postal_code!r} is not a valid postal code for {cc}", code="invalid_postal_code")
    if not street.strip() or not city.strip() or not label.strip():
        raise ToolError("label, street and city must not be empty", code="invalid_argument")
    for a in c.addresses.values():
        if a.street.lower() == street.strip().lower() and a.postal_code == pc:
            raise ToolError(f"This address is already saved as {a.address_id} ({a.label})", code="already_exists")
    aid = f"AD-{state.next_address_seq:04d}"
    state.next_address_seq += 1
    addr = Address(address_id=aid, label=label.strip(), recipient=(recipient or c.name).strip(),
                   street=street.strip(), city=city.strip(), postal_code=pc, country=cc)
    c.addresses[aid] = addr
    return addr


@tool
def redeem_gift_card(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    code: Annotated[str, Field(description="Gift card code, e.g. GIFT-7Q2M-K9LD (case-insensitive)")],
) -> GiftCardRedemption:
    """Redeem a gift card: its full amount is added to the shopper's store credit (used at checkout with
    use_store_credit=true). Returns the amount added and the new store credit balance.
    Errors: not_found (unknown customer or gift card code), already_redeemed, expired.
    """
    c = _customer(state, customer_id)
    key = code.strip().upper()
    g = state.gift_cards.get(key)
    if g is None:
        raise ToolError(f"No gift card with code {code}; codes look like GIFT-7Q2M-K9LD", code="not_found")
    if g.redeemed_by is not None:
        raise ToolError(f"Gift card {key} was already redeemed on {g.redeemed_at:%Y-%m-%d}", code="already_redeemed")
    if g.valid_until < _today(state):
        raise ToolError(f"Gift card {key} expired on {g.valid_until}", code="expired")
    g.redeemed_by = c.customer_id
    g.redeemed_at = state.now
    c.store_credit = _money(c.store_credit + g.amount)
    return GiftCardRedemption(code=key, amount_added=g.amount, store_credit_balance=c.store_credit)


# ----------------------------------------------------------------------------- cart


@tool(read_only=True)
def view_shopping_cart(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    address_id: Annotated[str | None, Field(description="Price shipping and VAT for this saved address; default: the first saved address")] = None,
    shipping_speed: Annotated[Literal["standard", "express"], Field(description="standard (free from 60 EUR of goods) or express")] = "standard",
) -> CartView:
    """Show a shopper's cart with the totals checkout would charge.

    Returns each line (variant_id, product_name, colour, size, unit_price, quantity, line_total,
    discount, available stock), the promo_code and a promo_note (why it is not applied, if it no
    longer qualifies), subtotal, discount, shipping, vat_rate, tax and total in EUR.
    Errors: not_found (unknown customer or address).
    """
    c = _customer(state, customer_id)
    if address_id is not None:
        _address(c, address_id)
    return _cart_view(state, c, address_id, shipping_speed)


@tool
def add_cart_item(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    variant_id: VariantId,
    quantity: Annotated[int, Field(ge=1, le=10, description="Units to add (1-10); added to any already in the cart")] = 1,
) -> CartView:
    """Put a product variant in the shopper's cart (or raise the quantity of a line already there).

    Returns the updated cart with totals (see view_shopping_cart).
    Errors: not_found (unknown customer or variant), discontinued (product no longer sold),
    out_of_stock (not enough units across warehouses), limit_exceeded (more than 10 of one variant).
    """
    c = _customer(state, customer_id)
    v = _variant(state, variant_id)
    if not state.products[v.product_id].active:
        raise ToolError(f"{state.products[v.product_id].name} is discontinued and can no longer be ordered",
                        code="discontinued")
    cart = _cart(state, customer_id)
    line = next((x for x in cart.lines if x.variant_id == variant_id), None)
    _check_line_quantity(state, v, quantity + (line.quantity if line else 0))
    if line is not None:
        line.quantity += quantity
    else:
        cart.lines.append(CartLine(variant_id=variant_id, quantity=quantity))
    state.carts[customer_id] = cart
    return _cart_view(state, c)


@tool(idempotent=True)
def update_cart_item(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    variant_id: VariantId,
    quantity: Annotated[int, Field(ge=1, le=10, description="New quantity for the line (1-10); use remove_cart_item to drop it")],
) -> CartView:
    """Set the quantity of a line already in the cart. Returns the updated cart with totals.
    Errors: not_found (unknown customer, or the variant is not in the cart), invalid_state (the line
    already has this quantity), out_of_stock, limit_exceeded.
    """
    c = _customer(state, customer_id)
    cart = _cart(state, customer_id)
    line = next((x for x in cart.lines if x.variant_id == variant_id), None)
    if line is None:
        raise ToolError(f"{variant_id} is not in the cart; use add_cart_item", code="not_found")
    if line.quantity == quantity:
        raise ToolError(f"The cart already has {quantity} of {variant_id}", code="invalid_state")
    _check_line_quantity(state, state.variants[variant_id], quantity)
    line.quantity = quantity
    return _cart_view(state, c)


@tool(destructive=True)
def remove_cart_item(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    variant_id: VariantId,
) -> CartView:
    """Remove a line from the shopper's cart (emptying the cart also drops its promo code).
    Returns the updated cart with totals.
    Errors: not_found (unknown customer, or the variant is not in the cart).
    """
    c = _customer(state, customer_id)
    cart = _cart(state, customer_id)
    if not any(x.variant_id == variant_id for x in cart.lines):
        raise ToolError(f"{variant_id} is not in the cart of {customer_id}", code="not_found")
    cart.lines = [x for x in cart.lines if x.variant_id != variant_id]
    if not cart.lines:
        cart.promo_code = None
    return _cart_view(state, c)


@tool
def apply_cart_promo_code(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    code: Annotated[str, Field(description="Promo code, e.g. WINTER15 (case-insensitive); replaces any code already applied")],
) -> CartView:
    """Apply a promo code to the cart (one code per order; a new code replaces the previous one).

    Codes give a percentage off (possibly only on one category), a fixed amount off, or free standard
    shipping, and may need a minimum subtotal or be valid on a first order only.
    Returns the updated cart with the discount.
    Errors: not_found (unknown customer or code), invalid_state (empty cart, or the code is already
    applied), promo_expired, promo_not_eligible (minimum subtotal, category or first-order rule not met).
    """
    c = _customer(state, customer_id)
    key = code.strip().upper()
    cart = _cart(state, customer_id)
    if not cart.lines:
        raise ToolError("The cart is empty; add items before applying a promo code", code="invalid_state")
    promo = state.promo_codes.get(key)
    if promo is None:
        raise ToolError(f"No promo code {code}", code="not_found")
    if cart.promo_code == key:
        raise ToolError(f"{key} is already applied to this cart", code="invalid_state")
    problem = _promo_problem(state, customer_id, promo, cart.lines)
    if problem is not None:
        raise problem
    cart.promo_code = key
    state.carts[customer_id] = cart
    return _cart_view(state, c)


@tool(destructive=True)
def remove_cart_promo_code(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
) -> CartView:
    """Drop the promo code from the shopper's cart (e.g. one that no longer applies after the cart
    changed, which blocks checkout); the items stay in the cart. Returns the updated cart with totals.
    Errors: not_found (unknown customer), invalid_state (no promo code is applied to the cart).
    """
    c = _customer(state, customer_id)
    cart = state.carts.get(customer_id)
    if cart is None or cart.promo_code is None:
        raise ToolError(f"No promo code is applied to the cart of {customer_id}", code="invalid_state")
    cart.promo_code = None
    return _cart_view(state, c)


# ----------------------------------------------------------------------------- orders


@tool
def place_store_order(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    address_id: Annotated[str, Field(description="Saved shipping address id, e.g. AD-0001 (see find_shopper_account)")],
    payment_method_id: Annotated[str | None, Field(description="Stored payment method id, e.g. PM-0001; may be omitted only when store credit covers the whole total")] = None,
    shipping_speed: Annotated[Literal["standard", "express"], Field(description="standard (4.95, free from 60 EUR of goods after discount) or express (14.95)")] = "standard",
    use_store_credit: Annotated[bool, Field(description="Pay with the shopper's store credit first, the rest with the payment method")] = False,
) -> OrderDetails:
    """Check out the shopper's whole cart into an order (status processing) and empty the cart.

    Stock is reserved from warehouses in the destination country first, then the others by id.
    Totals: subtotal - promo discount + shipping, plus VAT of the destination country on that sum.
    Returns the order with its new order_id (ORD-xxxxx), lines, totals and how it was paid.
    Errors: not_found (unknown customer, address or payment method), invalid_state (empty cart),
    out_of_stock, promo_expired / promo_not_eligible (the cart's code no longer applies: apply another
    code, change the cart or drop the code with remove_cart_promo_code), card_expired, payment_required (no payment method and not enough store
    credit).
    """
    c = _customer(state, customer_id)
    addr = _address(c, address_id)
    cart = _cart(state, customer_id)
    if not cart.lines:
        raise ToolError("The cart is empty; add items with add_cart_item first", code="invalid_state")
    for x in cart.lines:
        v = state.variants[x.variant_id]
        if x.quantity > _available(v):
            raise ToolError(f"Only {_available(v)} of {v.variant_id} left in stock (cart has {x.quantity}); "
                            "update or remove that line", code="out_of_stock")
    promo = state.promo_codes.get(cart.promo_code) if cart.promo_code else None
    if promo is not None:
        problem = _promo_problem(state, customer_id, promo, cart.lines)
        if problem is not None:
            raise ToolError(f"{problem.message}; the cart's code {promo.code} no longer applies: drop it with "
                            "remove_cart_promo_code or apply another code", code=problem.code)
    p = _price(state, cart.lines, promo, addr.country, shipping_speed)
    credit = _money(min(c.store_credit, p.total)) if use_store_credit else 0.0
    due = _money(p.total - credit)
    pm = None
    if payment_method_id is not None:
        pm = c.payment_methods.get(payment_method_id)
        if pm is None:
            known = ", ".join(c.payment_methods) or "none"
            raise ToolError(f"{customer_id} has no payment method {payment_method_id}; stored: {known}",
                            code="not_found")
        if pm.kind == "card" and pm.expiry and pm.expiry < state.now.strftime("%Y-%m"):
            raise ToolError(f"The {pm.brand} card ending {pm.last4} expired {pm.expiry}; use another payment method",
                            code="card_expired")
    if due > 0 and pm is None:
        raise ToolError(f"{due:.2f} EUR is left to pay after store credit ({credit:.2f}); give a payment_method_id",
                        code="payment_required")
    lines = []
    for i, x in enumerate(cart.lines):
        v = state.variants[x.variant_id]
        need = x.quantity
        allocs = []
        for wid in sorted(v.stock, key=lambda w: (state.warehouses[w].country != addr.country, w)):
            take = min(need, v.stock[wid])
            if take > 0:
                v.stock[wid] -= take
                allocs.append(Allocation(warehouse_id=wid, quantity=take))
                need -= take
        prod = state.products[v.product_id]
        lines.append(OrderLine(variant_id=v.variant_id, product_id=prod.product_id, product_name=prod.name,
                               colour=v.colour, size=v.size, unit_price=v.price, quantity=x.quantity,
                               discount=p.line_discounts[i], allocations=allocs))
    oid = f"ORD-{10000 + state.next_order_seq}"
    state.next_order_seq += 1
    c.store_credit = _money(c.store_credit - credit)
    order = Order(order_id=oid, customer_id=customer_id, status="processing", lines=lines,
                  shipping_address=addr.model_copy(), shipping_speed=shipping_speed,
                  promo_code=cart.promo_code if promo is not None else None, subtotal=p.subtotal,
                  discount=p.discount, shipping=p.shipping, vat_rate=p.vat_rate, tax=p.tax, total=p.total,
                  paid_with_store_credit=credit, charged_to_payment_method=due,
                  payment_method_id=pm.payment_method_id if pm is not None and due > 0 else None,
                  placed_at=state.now)
    state.orders[oid] = order
    cart.lines = []
    cart.promo_code = None
    state.carts[customer_id] = cart
    return _details(state, order)


def _details(state: OnlineStoreDB, o: Order) -> OrderDetails:
    return OrderDetails(**o.model_dump(), cancellable=o.status == "processing",
                        return_deadline=_return_deadline(state, o))


@tool(read_only=True)
def list_store_orders(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    status: Annotated[OrderStatus | None, Field(description="Only orders in this status")] = None,
) -> list[OrderSummary]:
    """List a shopper's orders, newest first: order_id, status (processing / shipped / delivered /
    cancelled), placed_at, delivered_at, total (EUR) and the items as 'quantity x product (colour, size)
    [variant_id]'. Use get_store_order for one order's full detail.
    Errors: not_found (unknown customer).
    """
    _customer(state, customer_id)
    out = []
    for o in state.orders.values():
        if o.customer_id != customer_id or (status is not None and o.status != status):
            continue
        out.append(OrderSummary(
            order_id=o.order_id, status=o.status, placed_at=o.placed_at.isoformat(),
            delivered_at=o.delivered_at.isoformat() if o.delivered_at else None, total=o.total,
            items=[f"{x.quantity} x {x.product_name} ({x.colour}, {x.size}) [{x.variant_id}]" for x in o.lines]))
    out.sort(key=lambda s: (s.placed_at, s.order_id), reverse=True)
    return out


@tool(read_only=True)
def get_store_order(state: OnlineStoreDB, *, order_id: OrderId) -> OrderDetails:
    """Get one order: lines (unit_price, quantity, discount, returned_quantity), shipping address and
    speed, subtotal, discount, shipping, vat_rate, tax, total, how it was paid (store credit and payment
    method), refunds so far, status with placed/shipped/delivered/cancelled times, return ids,
    cancellable (true while processing) and return_deadline (30 days after delivery).
    Errors: not_found (unknown order_id).
    """
    return _details(state, _order(state, order_id))


@tool(destructive=True)
def cancel_store_order(
    state: OnlineStoreDB,
    *,
    order_id: OrderId,
    reason: Annotated[str, Field(description="Why the shopper cancels (free text)")] = "",
) -> CancellationResult:
    """Cancel an order that has not shipped yet (status processing): the reserved stock goes back to its
    warehouses, the card/PayPal charge is refunded and store credit used is returned to the account.
    Returns the refunds and the new store credit balance.
    Errors: not_found, already_cancelled, invalid_state (already shipped or delivered: request a return
    after delivery instead).
    """
    o = _order(state, order_id)
    if o.status == "cancelled":
        raise ToolError(f"{order_id} was already cancelled on {o.cancelled_at:%Y-%m-%d}", code="already_cancelled")
    if o.status != "processing":
        raise ToolError(f"{order_id} is {o.status} and can no longer be cancelled; once delivered, use "
                        "request_order_return", code="invalid_state")
    c = state.customers[o.customer_id]
    for line in o.lines:
        v = state.variants[line.variant_id]
        for a in line.allocations:
            v.stock[a.warehouse_id] = v.stock.get(a.warehouse_id, 0) + a.quantity
    o.status = "cancelled"
    o.cancelled_at = state.now
    o.cancel_reason = reason
    o.refunded_to_payment_method = o.charged_to_payment_method
    o.refunded_to_store_credit = o.paid_with_store_credit
    c.store_credit = _money(c.store_credit + o.paid_with_store_credit)
    return CancellationResult(order_id=order_id, status=o.status, refunded_to_payment_method=o.refunded_to_payment_method,
                              refunded_to_store_credit=o.refunded_to_store_credit, store_credit_balance=c.store_credit)


@tool
def request_order_return(
    state: OnlineStoreDB,
    *,
    order_id: OrderId,
    items: Annotated[list[ReturnItem], Field(min_length=1, description="What goes back: [{variant_id, quantity}, ...]")],
    reason: Annotated[ReturnReason, Field(description="too_small, too_large, defective, not_as_described, wrong_item or changed_mind")],
    refund_to: Annotated[Literal["original_payment", "store_credit"], Field(description="original_payment (the card/PayPal charged; any part paid with store credit goes back to store credit) or store_credit")] = "original_payment",
    note: Annotated[str, Field(description="Optional free-text comment for the returns team")] = "",
) -> ReturnRequest:
    """Return items of a delivered order within 30 days of delivery; the refund is issued at once.

    Refund per unit = unit price minus its share of the line's promo discount, plus the order's VAT rate;
    shipping is not refunded. Rounding is applied to a line's cumulative refund, so returning units one
    at a time refunds exactly what returning them together would. Returns the return (RMA-xxxx) with per-line refunds, refund_amount and
    where it went.
    Errors: not_found (unknown order, or a variant not in the order), invalid_state (order not delivered
    yet: cancel it while processing), return_window_closed, not_returnable (final-sale item),
    invalid_quantity (more than bought minus already returned, or a variant listed twice).
    """
    o = _order(state, order_id)
    if o.status != "delivered" or o.delivered_at is None:
        hint = "; cancel it instead with cancel_store_order" if o.status == "processing" else ""
        raise ToolError(f"{order_id} is {o.status}; only delivered orders can be returned{hint}", code="invalid_state")
    deadline = _return_deadline(state, o)
    if deadline is not None and _today(state) > deadline:
        raise ToolError(f"{order_id} was delivered on {o.delivered_at:%Y-%m-%d}; the {state.return_window_days}-day "
                        f"return window closed on {deadline}", code="return_window_closed")
    seen: set[str] = set()
    plan: list[tuple[OrderLine, int, float]] = []
    for it in items:
        if it.variant_id in seen:
            raise ToolError(f"{it.variant_id} is listed twice; give one entry per variant", code="invalid_quantity")
        seen.add(it.variant_id)
        line = next((x for x in o.lines if x.variant_id == it.variant_id), None)
        if line is None:
            raise ToolError(f"{it.variant_id} is not part of {order_id}", code="not_found")
        if state.products[line.product_id].final_sale:
            raise ToolError(f"{line.product_name} was a final-sale item and cannot be returned", code="not_returnable")
        left = line.quantity - line.returned_quantity
        if it.quantity > left:
            raise ToolError(f"Only {left} of {it.variant_id} can still be returned from {order_id}",
                            code="invalid_quantity")
        plan.append((line, it.quantity, _line_refund(state, o, line, it.quantity)))
    amount = _money(sum(r for _, _, r in plan))
    to_pm = 0.0
    if refund_to == "original_payment":
        to_pm = _money(min(amount, o.charged_to_payment_method - o.refunded_to_payment_method))
    to_credit = _money(amount - to_pm)
    for line, q, _ in plan:
        line.returned_quantity += q
    rid = f"RMA-{state.next_return_seq:04d}"
    state.next_return_seq += 1
    o.refunded_to_payment_method = _money(o.refunded_to_payment_method + to_pm)
    o.refunded_to_store_credit = _money(o.refunded_to_store_credit + to_credit)
    o.return_ids.append(rid)
    c = state.customers[o.customer_id]
    c.store_credit = _money(c.store_credit + to_credit)
    ret = ReturnRequest(return_id=rid, order_id=order_id, customer_id=o.customer_id,
                        lines=[ReturnLine(variant_id=line.variant_id, quantity=q, refund=r) for line, q, r in plan],
                        reason=reason, note=note, refund_to=refund_to, refund_amount=amount,
                        refunded_to_payment_method=to_pm, refunded_to_store_credit=to_credit, created_at=state.now)
    state.returns[rid] = ret
    return ret


# ----------------------------------------------------------------------------- reviews


@tool
def post_product_review(
    state: OnlineStoreDB,
    *,
    customer_id: CustomerId,
    product_id: Annotated[str, Field(description="Product id, e.g. P-104")],
    rating: Annotated[int, Field(ge=1, le=5, description="Stars, 1 (worst) to 5 (best)")],
    title: Annotated[str, Field(description="Short headline (free text)")] = "",
    body: Annotated[str, Field(description="Review text (free text)")] = "",
) -> Review:
    """Publish a product review by a shopper who received the product (a delivered order holds it).
    One review per shopper and product. Returns the review with its id (RV-xxxx).
    Errors: not_found (unknown customer or product), not_purchased (no delivered order with this
    product), already_reviewed.
    """
    c = _customer(state, customer_id)
    if product_id not in state.products:
        raise ToolError(f"No product {product_id}; product ids look like P-104", code="not_found")
    if not any(o.customer_id == customer_id and o.status == "delivered" and any(x.product_id == product_id for x in o.lines)
               for o in state.orders.values()):
        raise ToolError(f"{c.name} has no delivered order with {state.products[product_id].name}; only buyers can "
                        "review a product", code="not_purchased")
    old = next((r for r in state.reviews.values() if r.customer_id == customer_id and r.product_id == product_id), None)
    if old is not None:
        raise ToolError(f"{c.name} already reviewed this product ({old.review_id})", code="already_reviewed")
    rid = f"RV-{state.next_review_seq:04d}"
    state.next_review_seq += 1
    r = Review(review_id=rid, product_id=product_id, customer_id=customer_id, rating=rating, title=title, body=body,
               created_at=state.now)
    state.reviews[rid] = r
    return r
