"""The OnlineStore database: one web shop's catalog (products, size/colour variants, per-warehouse
stock), customer accounts (addresses, stored payment methods, store credit), shopping carts, promo
codes, gift cards, orders, returns and product reviews.  All money is EUR, stored as floats rounded
to 2 decimals.

Prices are net of VAT; an order adds VAT at the rate of the destination country
(``OnlineStoreDB.vat_rates``) on the discounted goods plus shipping.  Stock is a count per warehouse;
placing an order reserves units from warehouses (allocations on the order line) and cancelling puts
them back.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

ProductCategory = Literal["outerwear", "knitwear", "footwear", "accessories", "home", "electronics"]
OrderStatus = Literal["processing", "shipped", "delivered", "cancelled"]
ReturnReason = Literal["too_small", "too_large", "defective", "not_as_described", "wrong_item", "changed_mind"]


class Warehouse(BaseModel):
    warehouse_id: str
    name: str
    country: str


class Product(BaseModel):
    product_id: str
    name: str
    brand: str
    category: ProductCategory
    description: str
    final_sale: bool = False
    active: bool = True


class Variant(BaseModel):
    variant_id: str
    product_id: str
    colour: str
    size: str
    price: float
    stock: dict[str, int] = Field(default_factory=dict)


class Address(BaseModel):
    address_id: str
    label: str
    recipient: str
    street: str
    city: str
    postal_code: str
    country: str


class PaymentMethod(BaseModel):
    payment_method_id: str
    kind: Literal["card", "paypal"]
    brand: str
    last4: str | None = None
    expiry: str | None = None
    email: str | None = None


class Customer(BaseModel):
    customer_id: str
    name: str
    email: str
    addresses: dict[str, Address] = Field(default_factory=dict)
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict)
    store_credit: float = 0.0
    created_at: datetime


class CartLine(BaseModel):
    variant_id: str
    quantity: int


class Cart(BaseModel):
    customer_id: str
    lines: list[CartLine] = Field(default_factory=list)
    promo_code: str | None = None


class PromoCode(BaseModel):
    code: str
    description: str
    kind: Literal["percent", "fixed", "free_shipping"]
    value: float = 0.0
    min_subtotal: float = 0.0
    category: ProductCategory | None = None
    first_order_only: bool = False
    valid_until: date


class GiftCard(BaseModel):
    code: str
    amount: float
    valid_until: date
    redeemed_by: str | None = None
    redeemed_at: datetime | None = None


class Allocation(BaseModel):
    warehouse_id: str
    quantity: int


class OrderLine(BaseModel):
    variant_id: str
    product_id: str
    product_name: str
    colour: str
    size: str
    unit_price: float
    quantity: int
    discount: float = 0.0
    returned_quantity: int = 0
    allocations: list[Allocation] = Field(default_factory=list)


class Order(BaseModel):
    order_id: str
    customer_id: str
    status: OrderStatus
    lines: list[OrderLine]
    shipping_address: Address
    shipping_speed: Literal["standard", "express"]
    promo_code: str | None = None
    subtotal: float
    discount: float
    shipping: float
    vat_rate: float
    tax: float
    total: float
    paid_with_store_credit: float = 0.0
    charged_to_payment_method: float = 0.0
    payment_method_id: str | None = None
    refunded_to_payment_method: float = 0.0
    refunded_to_store_credit: float = 0.0
    placed_at: datetime
    shipped_at: datetime | None = None
    delivered_at: datetime | None = None
    cancelled_at: datetime | None = None
    cancel_reason: str = ""
    return_ids: list[str] = Field(default_factory=list)


class ReturnLine(BaseModel):
    variant_id: str
    quantity: int
    refund: float


class ReturnRequest(BaseModel):
    return_id: str
    order_id: str
    customer_id: str
    lines: list[ReturnLine]
    reason: ReturnReason
    note: str = ""
    refund_to: Literal["original_payment", "store_credit"]
    refund_amount: float
    refunded_to_payment_method: float
    refunded_to_store_credit: float
    status: Literal["refunded"] = "refunded"
    created_at: datetime


class Review(BaseModel):
    review_id: str
    product_id: str
    customer_id: str
    rating: int
    title: str = ""
    body: str = ""
    verified_purchase: bool = True
    created_at: datetime


class OnlineStoreDB(BaseModel):
    """Root model: the shop's catalog, accounts, carts, orders, returns and reviews, plus the fixed
    clock, the store's policies and the id counters."""

    now: datetime
    store_name: str
    currency: Literal["EUR"] = "EUR"
    vat_rates: dict[str, float] = Field(default_factory=dict)
    standard_shipping: float = 4.95
    express_shipping: float = 14.95
    free_shipping_threshold: float = 60.0
    return_window_days: int = 30
    max_quantity_per_line: int = 10
    warehouses: dict[str, Warehouse] = Field(default_factory=dict)
    products: dict[str, Product] = Field(default_factory=dict)
    variants: dict[str, Variant] = Field(default_factory=dict)
    customers: dict[str, Customer] = Field(default_factory=dict)
    carts: dict[str, Cart] = Field(default_factory=dict)
    promo_codes: dict[str, PromoCode] = Field(default_factory=dict)
    gift_cards: dict[str, GiftCard] = Field(default_factory=dict)
    orders: dict[str, Order] = Field(default_factory=dict)
    returns: dict[str, ReturnRequest] = Field(default_factory=dict)
    reviews: dict[str, Review] = Field(default_factory=dict)
    next_order_seq: int = 1
    next_return_seq: int = 1
    next_review_seq: int = 1
    next_address_seq: int = 1
